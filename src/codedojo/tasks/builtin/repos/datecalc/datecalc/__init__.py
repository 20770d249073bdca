"""Calendar arithmetic on plain dates."""
