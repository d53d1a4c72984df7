"""Views: the live dashboard, the saved page, the chart, pickers and the train form."""
