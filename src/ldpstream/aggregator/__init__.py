"""aggregator: the write side, the stream processor (decode, validate, deduplicate, accumulate into the store), its
store, plans and estimates, the poisoning audit, and the pipeline's health; the read API is `ldpstream.readapi`."""
