//! Pins and other inputs against their trust rules: archives, folder pins, links, FIFOs, `.git` entries, real source distributions.
