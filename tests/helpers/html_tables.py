"""The cells of the HTML tables a notebook displays (pandas' DataFrame._repr_html_), read with the
standard library's parser (no lxml or bs4 here), so that a test can compare what a notebook
showed with numbers it recomputes. Row headers that pandas merges with rowspan (a MultiIndex)
are repeated on every row they span."""
from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class Table:
    """head: the rows of <thead>; body: the rows of <tbody>, row headers first, as text."""

    head: list[list[str]] = field(default_factory=list)
    body: list[list[str]] = field(default_factory=list)

    def records(self) -> list[dict[str, str]]:
        """Body rows as {column: cell}: column names from the first head row, index names
        (pandas' second head row, when the index is named) for the leading row headers."""
        names = list(self.head[0])
        if len(self.head) > 1:  # pandas puts the index names in a row of their own
            names = [index or column for index, column in zip(self.head[1], names)]
        return [dict(zip(names, row)) for row in self.body]


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: list[Table] = []
        self._section: list[list[str]] | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._span = 1
        self._pending: dict[int, tuple[str, int]] = {}  # column -> (text, rows still to fill)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append(Table())
        elif tag in ("thead", "tbody") and self.tables:
            self._section = self.tables[-1].head if tag == "thead" else self.tables[-1].body
            self._pending = {}
        elif tag == "tr" and self._section is not None:
            self._row = []
            self._fill()
        elif tag in ("th", "td") and self._row is not None:
            self._cell = []
            self._span = int(dict(attrs).get("rowspan") or 1)

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("th", "td") and self._cell is not None and self._row is not None:
            text = "".join(self._cell).strip()
            if self._span > 1:
                self._pending[len(self._row)] = (text, self._span - 1)
            self._row.append(text)
            self._cell = None
            self._fill()
        elif tag == "tr" and self._row is not None and self._section is not None:
            self._section.append(self._row)
            self._row = None
        elif tag in ("thead", "tbody"):
            self._section = None

    def _fill(self) -> None:
        """Repeats the merged cells that span into the current row at its current position."""
        assert self._row is not None
        while len(self._row) in self._pending:
            text, left = self._pending.pop(len(self._row))
            if left > 1:
                self._pending[len(self._row)] = (text, left - 1)
            self._row.append(text)


def read_tables(html: str) -> list[Table]:
    """Every <table> of `html`, in order."""
    reader = _Reader()
    reader.feed(html)
    return reader.tables
