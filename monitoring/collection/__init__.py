"""Collection: scraping (scraper), the exposition format parser (exposition), the scrape
targets (targets) and what a scrape becomes as stored samples (collect). Above the judge,
below the sources and selectors that read what it stored."""
