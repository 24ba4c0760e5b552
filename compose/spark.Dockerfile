# Spark standalone master/worker image for compose/docker-compose.yml.
#
# Spark comes from pip's pyspark, pinned to the same version as pyproject.toml
# (tests/test_compose.py checks that), so the cluster runs exactly the Spark the driver was
# tested with. bookworm, not the default trixie, because trixie has no OpenJDK 17.
# iproute2 provides `tc`, which pgval runs via `docker exec` to verify that no netem qdisc
# outlives a delay fault; procps provides `ps`, which Spark's launch scripts call.
FROM python:3.11-slim-bookworm

ARG PYSPARK_VERSION=4.2.0

RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        openjdk-17-jre-headless procps iproute2 \
    && rm -rf /var/lib/apt/lists/*

RUN pip install --no-cache-dir "pyspark==${PYSPARK_VERSION}"

# JAVA_HOME differs per architecture (...-amd64, ...-arm64): give it one stable path.
# The build fails here if SPARK_HOME below is not where pip put pyspark.
ENV SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    JAVA_HOME=/usr/lib/jvm/java-17
RUN ln -sfn "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" "${JAVA_HOME}" \
    && "${JAVA_HOME}/bin/java" -version \
    && command -v spark-class \
    && python3 -c "import os, pyspark; \
assert os.path.dirname(pyspark.__file__) == os.environ['SPARK_HOME'], pyspark.__file__"

# Executors (and Python workers, were there UDFs) use the same interpreter path as the runner
# image, whose driver ships PYSPARK_PYTHON=/usr/local/bin/python3 to them.
ENV PYSPARK_PYTHON=/usr/local/bin/python3 \
    SPARK_WORKER_DIR=/opt/spark-work/worker \
    SPARK_LOCAL_DIRS=/opt/spark-work/tmp
WORKDIR /opt/spark-work

CMD ["spark-class", "org.apache.spark.deploy.master.Master"]
