"""Plugin interfaces of the routing core (`base`), the prefix-match seam (`cached`), the
pipeline that runs them (`pipeline`). Filters live in `routing.filters`, scorers in
`routing.scorers`, the choice in `routing.plugins.pick`."""
