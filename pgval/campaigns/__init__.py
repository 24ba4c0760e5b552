"""Many runs: the matrix of cells, the optimum-ingestion-rate search, the Kafka benches.
"""
