"""Cost: what removing a copy frees, for the post-projection patch and for every copy group."""
