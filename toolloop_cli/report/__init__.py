"""The run report: one self-contained HTML file per operation (``toolloop report OP``).

``data.report_data`` reads the store into a plain dict (operation, budgets, turns, calls with
their state history and both result projections, approvals, the verify result, a replay's
divergences, a diff); ``render.render_html`` lays it out with Jinja2 (docs/report.md).
"""
