"""collection: the contract devices and servers share (specs, wire format, pseudonyms and partitions, collectors,
topic names). Imports nothing of ours but `ldp`."""
