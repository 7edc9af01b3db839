"""The model repository: finding models and their files (a local folder, S3), and telling
when they change. What to load and how: lifecycle/planning.py."""
