"""Workload-adaptive factorization mechanism (McKenna, Maity, Mazumdar, Miklau): workloads, strategies, optimiser."""
