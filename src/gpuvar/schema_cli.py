"""Print the canonical schema (column, type, unit, group, source column per vendor) as Markdown."""

from __future__ import annotations


def configure(p):
    p.add_argument("--table", choices=["kernels", "memcpy"], default=None, help="one table only")


def markdown(tables=("kernels", "memcpy")) -> str:
    """The schema reference table; docs/schema.md is generated from this (a test keeps them in sync)."""
    from gpuvar.schema import canonical_columns, source_formats

    vendors = source_formats()
    lines = []
    for table in tables:
        lines += [f"### `{table}`", "", "| column | type | unit | group | " + " | ".join(vendors) + " | meaning |"]
        lines.append("|" + "---|" * (5 + len(vendors)))
        for c in canonical_columns(table):
            cells = [f"`{c.column}`", c.type, c.unit, c.group] + [c.sources[v] for v in vendors] + [c.description]
            lines.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
        lines.append("")
    return "\n".join(lines)


def run(args) -> int:
    print(markdown((args.table,) if args.table else ("kernels", "memcpy")))
    return 0
