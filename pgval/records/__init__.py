"""Records as columns: JSON lines and Kafka values parsed into numpy columns, tolerant of bad
records; the three phases.
"""
