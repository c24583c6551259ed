# The kinference picker (gRPC on 9002, Prometheus metrics on 9090) and its gateway (HTTP on
# 8080), one image: the command is `serve` unless another is given.
#   docker build -t kinference:0.1.0 .
#   docker run --rm -p 9002:9002 -p 9090:9090 kinference:0.1.0 [serve --config FILE]
#   docker run --rm -p 8080:8080 kinference:0.1.0 gateway --picker PICKER:9002
# PYTHON_IMAGE is any Debian-based image with python3.11 and its venv module; both stages
# must use the same one, since the venv copied into the final stage links to its python.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_NO_INPUT=1
# A C compiler and libc's headers, for the wheel's optional C extensions (kinference/native,
# setup.py); the final stage runs the compiled extension and needs neither.
RUN apt-get update \
    && apt-get install --yes --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
# Optional dependency groups of pyproject.toml to include, space-separated: k8s is what
# KINFERENCE_DISCOVERY=kubernetes needs, gateway what `kinference gateway` needs, kv-events
# what pools in precise prefix mode need. Never dev (test tools).
ARG EXTRAS="k8s gateway kv-events"
WORKDIR /src
# The runtime dependencies get a layer of their own, rebuilt only when pyproject.toml
# changes, not on every source edit. Entries naming kinference itself (an extra including
# another) are left out: that would fetch a package of the same name from the index.
COPY pyproject.toml ./
RUN python3 -m venv /opt/kinference \
    && python3 -c "import sys, tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; deps = p['dependencies'] + [d for e in sys.argv[1:] for d in p['optional-dependencies'][e]]; print(*(d for d in deps if not d.startswith('kinference')), sep='\n')" ${EXTRAS} > /tmp/requirements.txt \
    && /opt/kinference/bin/pip install --requirement /tmp/requirements.txt
COPY README.md setup.py ./
COPY kinference ./kinference
# Build the project's wheel (its C extensions compiled) and install it into the venv beside
# its dependencies (checked; the extension must import: a silent pure-Python fallback would
# cost CPU on every Pick); pip and setuptools are not needed at run time.
RUN /opt/kinference/bin/pip wheel --no-deps --wheel-dir /wheels . \
    && /opt/kinference/bin/pip install --no-deps /wheels/kinference-*.whl \
    && /opt/kinference/bin/pip check \
    && /opt/kinference/bin/python -c "import kinference.native._chain, kinference.native._prefix, kinference.native._ttft, kinference.native._scan" \
    && /opt/kinference/bin/pip uninstall --yes pip setuptools \
    && /opt/kinference/bin/kinference --version

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="kinference" \
      org.opencontainers.image.description="Picks the model and destination for every LLM inference request in a Kubernetes cluster" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
# A fixed numeric UID, so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
RUN groupadd --system --gid 10001 kinference \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin kinference
COPY --from=builder /opt/kinference /opt/kinference
# Bytecode was compiled at install time; the root filesystem is read-only in Kubernetes.
ENV PATH=/opt/kinference/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    KINFERENCE_LISTEN=0.0.0.0:9002 \
    KINFERENCE_METRICS_LISTEN=0.0.0.0:9090
USER 10001:10001
EXPOSE 9002 9090 8080
ENTRYPOINT ["kinference"]
CMD ["serve"]
