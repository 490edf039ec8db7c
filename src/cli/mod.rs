//! Command-line front end: argument definitions and the renderers that turn
//! library results into text or JSON. The only place that touches the terminal.
