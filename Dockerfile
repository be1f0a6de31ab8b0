# One image for every ldpstream service (aggregator, API, edge, simulator, SGD coordinator): `docker run IMAGE ldp --help`.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY src src
COPY examples examples
RUN pip install --no-cache-dir '.[server]'
ENV LDP_STATE_DIR=/var/lib/ldpstream
ENTRYPOINT ["ldp"]
CMD ["--help"]
