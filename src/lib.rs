//! fabemu
