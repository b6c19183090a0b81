"""What a run shows of itself: metrics, spans, the console, plots, files beside the run."""
