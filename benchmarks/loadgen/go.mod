module ldpstream/loadgen

go 1.22
