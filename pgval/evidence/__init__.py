"""What a run keeps and how it is checked again: the evidence bundle (records, run.json,
anomalies, seal), the re-check, the import of a run whose storing failed, the export for
`pgval check`.
"""
