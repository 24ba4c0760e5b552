"""The results database: the file (literal paths, WAL, read-only opening, foreign files
refused) and its tables.
"""
