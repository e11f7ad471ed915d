//! The install root against a hostile or careless world: paths from data, damaged entries and state, special files, modes, races, and the corruption campaign.
