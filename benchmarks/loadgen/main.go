// Command loadgen replays a file of pre-built HTTP requests against one server, with a fixed number in flight
// (and optionally at a fixed rate), for a bounded time, and prints counts and latencies as JSON.
//
// It exists so that the edge benchmark's client costs a fraction of the server's CPU: a Python client on the
// same cores takes about as much as the server it measures. Requests are signed ahead of time by the benchmark
// (each used once: the edge refuses a replayed signature), so this program knows nothing of the protocol.
//
// File format (little-endian): per request, u32 length + path, u32 header count, per header u32 length + name and
// u32 length + value, then u32 length + body.
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

type request struct {
	path    string
	headers [][2]string
	body    []byte
}

func readChunk(r *bufio.Reader) ([]byte, error) {
	var n uint32
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
		return nil, err
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}

func readRequests(path string) ([]request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var out []request
	for {
		p, err := readChunk(r)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var count uint32
		if err := binary.Read(r, binary.LittleEndian, &count); err != nil {
			return nil, err
		}
		req := request{path: string(p)}
		for i := uint32(0); i < count; i++ {
			name, err := readChunk(r)
			if err != nil {
				return nil, err
			}
			value, err := readChunk(r)
			if err != nil {
				return nil, err
			}
			req.headers = append(req.headers, [2]string{string(name), string(value)})
		}
		if req.body, err = readChunk(r); err != nil {
			return nil, err
		}
		out = append(out, req)
	}
}

func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

func main() {
	url := flag.String("url", "http://127.0.0.1:8080", "server base URL")
	file := flag.String("file", "", "requests file")
	seconds := flag.Float64("seconds", 8, "how long to send")
	concurrency := flag.Int("concurrency", 256, "requests in flight")
	rate := flag.Float64("rate", 0, "requests per second at most (0: as fast as answered)")
	flag.Parse()
	requests, err := readRequests(*file)
	if err != nil || len(requests) == 0 {
		fmt.Fprintln(os.Stderr, "loadgen: cannot read requests:", err)
		os.Exit(2)
	}
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		MaxIdleConns: *concurrency, MaxIdleConnsPerHost: *concurrency, MaxConnsPerHost: *concurrency,
		DisableCompression: true}}
	var next, errors int64 = 0, 0
	exhausted := atomic.Bool{}
	start := time.Now()
	deadline := start.Add(time.Duration(*seconds * float64(time.Second)))
	latencies := make([][]float64, *concurrency)
	statuses := make([]map[int]int, *concurrency)
	var wg sync.WaitGroup
	for w := 0; w < *concurrency; w++ {
		statuses[w] = map[int]int{}
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for time.Now().Before(deadline) {
				i := atomic.AddInt64(&next, 1) - 1
				if i >= int64(len(requests)) {
					exhausted.Store(true)
					return
				}
				if *rate > 0 {
					due := start.Add(time.Duration(float64(i) / *rate * float64(time.Second)))
					if d := time.Until(due); d > 0 {
						time.Sleep(d)
					}
				}
				r := requests[i]
				req, _ := http.NewRequest("POST", *url+r.path, bytes.NewReader(r.body))
				for _, h := range r.headers {
					req.Header.Set(h[0], h[1])
				}
				sent := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					atomic.AddInt64(&errors, 1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				latencies[w] = append(latencies[w], time.Since(sent).Seconds()*1000)
				statuses[w][resp.StatusCode]++
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	var all []float64
	counts := map[string]int{}
	for w := range latencies {
		all = append(all, latencies[w]...)
		for code, n := range statuses[w] {
			counts[strconv.Itoa(code)] += n
		}
	}
	sort.Float64s(all)
	out := map[string]any{
		"requests": len(all), "seconds": elapsed, "requests_per_s": float64(len(all)) / elapsed,
		"p50_ms": percentile(all, 0.50), "p99_ms": percentile(all, 0.99), "statuses": counts,
		"errors": errors, "exhausted": exhausted.Load(),
	}
	json.NewEncoder(os.Stdout).Encode(out)
}
