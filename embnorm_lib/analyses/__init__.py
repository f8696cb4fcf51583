"""The study layer's analyses: one module per kind of analysis. `plugins.py` registers each kind and the site; the
registry imports it the first time it is read (runner/registry.py), so no analysis module imports it back."""
