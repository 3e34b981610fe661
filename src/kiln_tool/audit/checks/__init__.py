"""One module per concern; each check takes a LibraryContext (or an ArtifactContext) and returns CheckResults."""
