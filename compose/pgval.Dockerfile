# The pgval runner for compose/docker-compose.yml: pgval itself, Java for the Spark driver, and
# the Spark/Kafka connector jars resolved at build time (no Maven Central access at run time).
#
# Build context is the repository root (see the compose file); the Dockerfile-specific ignore
# file next to this one keeps .venv, runs/ and .git out of it.
#
# pgval goes into the image's system Python, not a venv: the driver ships its interpreter path
# (PYSPARK_PYTHON) to the executors, and /usr/local/bin/python3 exists in the Spark image too.
# No docker CLI and no pumba in here: faults are injected from the host (docs/docker.md).
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17
RUN ln -sfn "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" "${JAVA_HOME}"

WORKDIR /opt/pgval-src
COPY pyproject.toml README.md ./
COPY pgval ./pgval
COPY oracle ./oracle
COPY topologies ./topologies
COPY faults ./faults
COPY datasets ./datasets
RUN pip install --no-cache-dir . && python3 -c "import pyspark; print('pyspark', pyspark.__version__)"

# Jars into a fixed cache that every user of the image shares.
ENV PGVAL_CACHE=/opt/pgval-cache \
    PYSPARK_PYTHON=/usr/local/bin/python3 \
    PYSPARK_DRIVER_PYTHON=/usr/local/bin/python3
RUN pgval setup-jars

WORKDIR /work
CMD ["sleep", "infinity"]
