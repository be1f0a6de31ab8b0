"""The read side (`ldp serve`): the HTTP read API over the aggregator's store (`api`), its time series (`series`),
the store-wide metrics it serves (`metrics`), the web console (`console`, `static/`) and its OpenAPI document
(`openapi.json`). It only reads what the aggregator's write side (`ldpstream.aggregator`) counted."""
