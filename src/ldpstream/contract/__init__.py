"""contract: what devices and servers share (specs, wire format, pseudonyms and partitions, collectors, topic names,
report validation, request signatures). Imports nothing of ours but `ldpstream.mechanisms`."""
