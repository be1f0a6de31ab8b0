module src/ldpstream/loadgen

go 1.22
