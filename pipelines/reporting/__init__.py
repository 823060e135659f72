"""The report edge: the night report as self-contained HTML (matplotlib plots inline), and the files it reads."""
