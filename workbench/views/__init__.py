"""Views of a run: the live dashboard, the saved page, the chart and the progress line."""
