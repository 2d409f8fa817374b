"""The explorer behind app.py: `sources` (what it may read under its root) and `figures` (what it draws), both
torch- and Streamlit-free, as is `cache` (the loaders' caches bounded by bytes); `loaders` (the cached reads),
`widgets` (what several views share) and `views` (one module a view), which draw with Streamlit."""
