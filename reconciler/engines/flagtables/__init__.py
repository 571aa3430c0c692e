"""Flag tables of the engines' releases (JSON), written by scripts/flag_tables.py and read by engines.flags."""
