"""The event schema, value normalisation, credentials out, counts, and the small file and operating-system tools every layer uses."""
