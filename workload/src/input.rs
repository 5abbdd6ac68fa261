//! Reading a user's input file within a stated size, for every file fabemu reads (scenarios,
//! ASTRA-sim network files, MSCCL algorithms, communicator groups, Chakra traces).
//!
//! A plain `read_to_string` reads until the end of the file, and some files have none:
//! `/dev/zero`, `/dev/urandom` or a pipe that never closes would be read until memory runs out.
//! Here a regular file larger than the limit is refused from its length alone, before a byte
//! is read; anything else (a pipe, a device, a process substitution) is read up to one byte
//! past the limit and refused if it got there. Either way at most `limit` bytes are held.

use std::io::Read;

use fabemu_fabric::units::ByteSize;
use std::path::Path;

/// Why an input file was not read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The operating system's error (no such file, permission, a directory ...).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Longer than the limit (a regular file's length, or what a stream gave before it was cut).
    #[error("it is larger than {}, the most fabemu reads of {what}{}", ByteSize(*.limit), endless(*.regular))]
    TooLarge {
        /// What the file is, for the message (`a scenario`).
        what: &'static str,
        /// The limit in bytes.
        limit: u64,
        /// Whether it is a regular file (else a device or pipe, which may never end).
        regular: bool,
    },
    /// Not UTF-8 text where text is expected.
    #[error("stream did not contain valid UTF-8")]
    NotUtf8,
}

fn endless(regular: bool) -> &'static str {
    if regular {
        ""
    } else {
        " (it is not a regular file: a device or a pipe may never end)"
    }
}

/// The bytes of `path`, at most `limit` of them; `what` names the kind of file in the error.
pub fn read_limited(path: &Path, limit: u64, what: &'static str) -> Result<Vec<u8>, InputError> {
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(InputError::Io(std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "it is a directory",
        )));
    }
    let regular = meta.is_file();
    if regular && meta.len() > limit {
        return Err(InputError::TooLarge {
            what,
            limit,
            regular,
        });
    }
    let mut bytes = Vec::new();
    // One byte past the limit tells a stream at the limit from a longer one.
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(InputError::TooLarge {
            what,
            limit,
            regular,
        });
    }
    Ok(bytes)
}

/// The text of `path` (UTF-8), at most `limit` bytes; see [`read_limited`].
pub fn read_text_limited(
    path: &Path,
    limit: u64,
    what: &'static str,
) -> Result<String, InputError> {
    String::from_utf8(read_limited(path, limit, what)?).map_err(|_| InputError::NotUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endless_and_large_inputs_are_cut_at_the_limit() {
        let zero = read_limited(Path::new("/dev/zero"), 1000, "a test file");
        assert!(
            matches!(
                zero,
                Err(InputError::TooLarge {
                    limit: 1000,
                    regular: false,
                    ..
                })
            ),
            "{zero:?}"
        );
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, vec![b'x'; 1001]).unwrap();
        let big = read_limited(&f, 1000, "a test file");
        assert!(
            matches!(big, Err(InputError::TooLarge { regular: true, .. })),
            "{big:?}"
        );
        assert_eq!(read_limited(&f, 1001, "a test file").unwrap().len(), 1001);
        std::fs::write(&f, [0xff, 0xfe]).unwrap();
        assert!(matches!(
            read_text_limited(&f, 10, "a test file"),
            Err(InputError::NotUtf8)
        ));
        assert!(matches!(
            read_limited(dir.path(), 10, "a test file"),
            Err(InputError::Io(_))
        ));
    }
}
