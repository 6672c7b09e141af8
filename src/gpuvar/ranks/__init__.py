"""Per-rank analysis of a multi-rank job: which rank reaches each collective last, by how much, how long the
others wait for it, and which of its kernels (or host gaps) make it late. See docs/ranks.md."""
