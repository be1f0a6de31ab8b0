"""The built-in workloads' names, importable without numpy: a spec's check and the CLI's help list them."""

WORKLOAD_NAMES = ("histogram", "prefix", "all_range", "all_marginals", "3way_marginals", "parity")
