"""The census: every copy of a counted step with its layer (the layer map), place and role."""
