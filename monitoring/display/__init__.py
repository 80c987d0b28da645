"""Display: a verdict's evidence as HTML (evidence) and the dashboard's chart data (charts).
Above the judge; read by views and template tags."""
