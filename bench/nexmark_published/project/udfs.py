"""Nexmark q14's user-defined function, in Python (the published one is the Java class
com.github.nexmark.flink.udf.CountChar): how many times the character `c` occurs in `s`."""


def count_char(s: str, c: str) -> int:
    """Occurrences of the character c in s; 0 for a NULL string (CountChar counts none)."""
    return 0 if s is None or not c else s.count(c[0])
