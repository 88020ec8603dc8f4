# memory backend tests
