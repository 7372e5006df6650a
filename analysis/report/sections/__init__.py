"""Report sections a recipe adds to its report: one module per (recipe, section), see the README."""
