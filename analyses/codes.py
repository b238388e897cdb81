"""Strings as dictionary codes: the timeline's name columns are Categorical, and a rule that
reads a name (a regex over kernel or API names) runs on the distinct names only, then selects
rows by their codes. Casting a 10M-row name column to strings costs ~0.5 GB and seconds; the
distinct names of a trace are hundreds.

Example:
    >>> import polars as pl
    >>> f = pl.DataFrame({"name": pl.Series(["cudaMemcpy", "cudaLaunchKernel", None,
    ...                                      "cudaMemcpy"], dtype=pl.Categorical)})
    >>> f.select(matches(f["name"], "^cudaMemcpy$")).to_series().to_list()
    [True, False, False, True]
"""

from __future__ import annotations

import polars as pl


def matches(names: pl.Series, pattern: str) -> pl.Expr:
    """Expression over the column named like ``names``: whether each row's value matches
    the regex ``pattern`` (``str.contains``), False for null. For a Categorical column the
    regex runs on its distinct values and the rows are selected by code; other columns
    are matched row by row (the same answer)."""
    col = pl.col(names.name)
    if names.dtype != pl.Categorical:
        return col.cast(pl.String).str.contains(pattern).fill_null(False)
    distinct = names.unique().drop_nulls()
    hit = distinct.filter(distinct.cast(pl.String).str.contains(pattern))
    return col.is_in(hit.implode()).fill_null(False)
