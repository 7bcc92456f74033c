"""Sources: which code issued each copy, and an eager capture's sources carried onto a graph run."""
