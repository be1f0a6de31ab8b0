# One image for every ldpstream service (aggregator, API, simulator, SGD coordinator): `docker run IMAGE ldp --help`.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY ldp ldp
COPY collection collection
COPY runtime runtime
COPY producer producer
COPY aggregator aggregator
COPY sgd_coordinator sgd_coordinator
COPY edge edge
COPY ldpstream ldpstream
COPY examples examples
RUN pip install --no-cache-dir .
ENV LDP_STATE_DIR=/var/lib/ldpstream
ENTRYPOINT ["ldp"]
CMD ["--help"]
