"""Benchmark results as Markdown: a figure's value with its unit, a table."""


def format_value(value: float, unit: str) -> str:
    if unit == "fraction":
        return f"{value:+.1%}"
    number = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{number} {unit}".rstrip()


def markdown_table(columns: list[str], rows: list[list]) -> str:
    def cell(value) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):  # four significant digits, without an exponent from 10,000 on
            return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
        return escaped(str(value))

    lines = ["| " + " | ".join(map(escaped, columns)) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def escaped(text: str) -> str:
    """`text` for a table cell: a bar (|x|, an absolute value) would end the cell."""
    return text.replace("|", "\\|")
