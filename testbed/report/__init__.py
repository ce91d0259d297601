"""A run folder's report: sections that return content, plots that return figures, one
markdown renderer, and one writer that puts them on disk.
"""
