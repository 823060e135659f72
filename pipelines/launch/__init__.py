"""Edges that run test attempts: a local subprocess launcher and a Kubernetes pod launcher."""
