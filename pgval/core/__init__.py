"""The foundation: names shared by every stage, errors, redaction, the one writer of private
files, the clock, extras, run shapes, the run spec and the driver's document.
"""
