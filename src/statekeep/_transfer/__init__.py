"""Moving States between stores and files: copy, export and import."""
