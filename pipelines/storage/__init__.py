"""Edges that keep files: local folders by default, S3 in production."""
