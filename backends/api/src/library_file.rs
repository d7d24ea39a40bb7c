//! Checks a candidate plugin file before it is handed to the dynamic loader.
//!
//! The dynamic loader maps a library's segments straight from the file. A segment that
//! extends past the end of a truncated file is mapped anyway, and the first access to it kills
//! the process with `SIGBUS`, long after `dlopen` returned; a directory, a FIFO or an empty path
//! make it block or open something else. This module owns the check that runs first: the path
//! must name a regular, non-empty file whose object header matches this process (ELF on Linux
//! and the other ELF platforms, Mach-O on macOS, PE on Windows; word size, byte order and
//! machine), and every segment the loader maps must lie inside the file.
//!
//! The check reads headers only, through bounds-checked reads of at most 64 bytes at a time,
//! and never panics, whatever the bytes. It must not map, load or run anything, and it is not a
//! verifier of the whole object format: a file that passes can still be refused by the loader
//! (a missing dependency, a bad relocation), which then reports an ordinary error. It cannot
//! see the libraries the file depends on (the loader finds and maps those itself), nor a file
//! that changes between this check and the loader opening it.
//!
//! The three formats are parsed on every platform ([`check_library_bytes`] takes the [`Host`]
//! to compare with), so each parser is tested everywhere; [`check_library_file`] checks a file
//! against [`Host::current`].

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use thiserror::Error;

/// The object formats a plugin can be in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Elf,
    MachO,
    Pe,
}

impl Format {
    fn library(self) -> &'static str {
        match self {
            Format::Elf => "an ELF shared library",
            Format::MachO => "a Mach-O dynamic library",
            Format::Pe => "a PE dynamic library (DLL)",
        }
    }
}

/// What a library must be built for to load into a process: the object format, the word size,
/// the byte order and the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Host {
    pub format: Format,
    /// 64-bit pointers.
    pub bits64: bool,
    pub little_endian: bool,
    /// The machine code of the format (ELF `e_machine`, Mach-O `cputype`, PE `Machine`);
    /// `None` on an architecture this module has no code for, which skips that comparison.
    pub machine: Option<u32>,
}

impl Host {
    /// This process.
    pub fn current() -> Host {
        let format = if cfg!(target_vendor = "apple") {
            Format::MachO
        } else if cfg!(windows) {
            Format::Pe
        } else {
            Format::Elf
        };
        Host {
            format,
            bits64: cfg!(target_pointer_width = "64"),
            little_endian: cfg!(target_endian = "little"),
            machine: machine_code(std::env::consts::ARCH, format),
        }
    }
}

/// The machine codes of the architectures Rust commonly targets: the architecture
/// (`std::env::consts::ARCH`), then its ELF `e_machine`, Mach-O `cputype` and PE `Machine`
/// (0 where the format has none).
const MACHINES: &[(&str, u32, u32, u32)] = &[
    ("x86_64", 62, 0x0100_0007, 0x8664),
    ("aarch64", 183, 0x0100_000c, 0xaa64),
    ("x86", 3, 7, 0x14c),
    ("arm", 40, 12, 0x1c4),
    ("riscv64", 243, 0, 0x5064),
    ("powerpc64", 21, 0x0100_0012, 0),
    ("powerpc", 20, 18, 0),
    ("s390x", 22, 0, 0),
    ("loongarch64", 258, 0, 0),
    ("mips", 8, 0, 0),
    ("mips64", 8, 0, 0),
    ("sparc64", 43, 0, 0),
];

/// The code of `arch` in `format`, if it has one.
fn machine_code(arch: &str, format: Format) -> Option<u32> {
    let &(_, elf, macho, pe) = MACHINES.iter().find(|m| m.0 == arch)?;
    let code = match format {
        Format::Elf => elf,
        Format::MachO => macho,
        Format::Pe => pe,
    };
    (code != 0).then_some(code)
}

/// A machine code in words: the architecture's name where it is known.
fn machine_name(format: Format, code: u32) -> String {
    match MACHINES
        .iter()
        .find(|m| machine_code(m.0, format) == Some(code))
    {
        Some(m) => format!("{} (machine {code:#x})", m.0),
        None => format!("machine {code:#x}"),
    }
}

/// Why a file cannot be handed to the dynamic loader.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FileProblem {
    /// An empty path (which the loader would take to mean the running program).
    #[error("the path is empty")]
    EmptyPath,
    /// The file does not exist or cannot be read.
    #[error("{0}")]
    Io(String),
    /// The path names something other than a regular file.
    #[error("it is {0}, not a regular file")]
    NotAFile(&'static str),
    #[error("the file is empty")]
    Empty,
    /// The file is not in this platform's object format at all.
    #[error("not {expected} (the file starts with bytes {start})")]
    UnknownFormat {
        expected: &'static str,
        start: String,
    },
    /// The file is a library of another platform (word size, byte order, machine).
    #[error("built for {found}, but this process needs {expected}")]
    Foreign { expected: String, found: String },
    /// The file is an object of the right platform that is not a loadable library.
    #[error("{0}, not a shared library")]
    NotALibrary(String),
    /// A header or a segment lies (partly) past the end of the file.
    #[error(
        "{what} (bytes {start}..{end}) extends past the end of the file ({len} bytes); the \
         file is truncated"
    )]
    Truncated {
        what: String,
        start: u64,
        end: u64,
        len: u64,
    },
    /// A header field is inconsistent.
    #[error("malformed {format} header: {detail}")]
    Malformed {
        format: &'static str,
        detail: String,
    },
}

fn malformed(format: &'static str, detail: impl Into<String>) -> FileProblem {
    FileProblem::Malformed {
        format,
        detail: detail.into(),
    }
}

/// Checks the file at `path` against this process ([`Host::current`]): a regular, non-empty
/// file in this platform's object format, built for this process, a library, with every
/// mapped segment inside the file.
pub fn check_library_file(path: &Path) -> Result<(), FileProblem> {
    if path.as_os_str().is_empty() {
        return Err(FileProblem::EmptyPath);
    }
    // The kind is checked before opening: opening a FIFO would block.
    let metadata = std::fs::metadata(path).map_err(|e| FileProblem::Io(e.to_string()))?;
    check_kind(&metadata)?;
    let file = File::open(path).map_err(|e| FileProblem::Io(e.to_string()))?;
    // The length (and kind) of what was opened, which is what the header reads see.
    let metadata = file
        .metadata()
        .map_err(|e| FileProblem::Io(e.to_string()))?;
    check_kind(&metadata)?;
    let mut image = Image {
        source: Source::File(&file),
        len: metadata.len(),
    };
    check_image(&mut image, &Host::current())
}

/// Checks the bytes of a whole file against `host`, as [`check_library_file`] checks a file.
pub fn check_library_bytes(bytes: &[u8], host: &Host) -> Result<(), FileProblem> {
    let mut image = Image {
        source: Source::Bytes(bytes),
        len: bytes.len() as u64,
    };
    check_image(&mut image, host)
}

fn check_kind(metadata: &std::fs::Metadata) -> Result<(), FileProblem> {
    let kind = metadata.file_type();
    if kind.is_file() {
        return Ok(());
    }
    if kind.is_dir() {
        return Err(FileProblem::NotAFile("a directory"));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return Err(FileProblem::NotAFile("a FIFO"));
        }
        if kind.is_socket() {
            return Err(FileProblem::NotAFile("a socket"));
        }
        if kind.is_block_device() {
            return Err(FileProblem::NotAFile("a block device"));
        }
        if kind.is_char_device() {
            return Err(FileProblem::NotAFile("a character device"));
        }
    }
    Err(FileProblem::NotAFile("a special file"))
}

/// The bytes being checked and their length, which every read is checked against.
struct Image<'a> {
    source: Source<'a>,
    len: u64,
}

enum Source<'a> {
    Bytes(&'a [u8]),
    File(&'a File),
}

impl Image<'_> {
    /// Fails with [`FileProblem::Truncated`] unless `start..start + size` lies inside the
    /// first `limit` bytes (the file, or one slice of a universal Mach-O file).
    fn within(
        &self,
        start: u64,
        size: u64,
        limit: u64,
        what: impl Fn() -> String,
    ) -> Result<(), FileProblem> {
        match start.checked_add(size) {
            Some(end) if end <= limit.min(self.len) => Ok(()),
            end => Err(FileProblem::Truncated {
                what: what(),
                start,
                end: end.unwrap_or(u64::MAX),
                len: self.len,
            }),
        }
    }

    /// Fills `buf` from byte `at`, which must lie inside the file with all of `buf`.
    fn read(
        &mut self,
        at: u64,
        buf: &mut [u8],
        what: impl Fn() -> String,
    ) -> Result<(), FileProblem> {
        self.within(at, buf.len() as u64, self.len, &what)?;
        match &mut self.source {
            Source::Bytes(bytes) => {
                // In range: `within` bounded `at + buf.len()` by the slice's length.
                let piece = usize::try_from(at)
                    .ok()
                    .and_then(|at| bytes.get(at..at + buf.len()))
                    .ok_or_else(|| FileProblem::Io(format!("cannot read {}", what())))?;
                buf.copy_from_slice(piece);
                Ok(())
            }
            Source::File(file) => file
                .seek(SeekFrom::Start(at))
                .and_then(|_| file.read_exact(buf))
                .map_err(|e| FileProblem::Io(format!("reading {}: {e}", what()))),
        }
    }
}

/// Byte order of the fields of a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Endian {
    Little,
    Big,
}

impl Endian {
    fn u16(self, b: &[u8], at: usize) -> u16 {
        let x = field::<2>(b, at);
        match self {
            Endian::Little => u16::from_le_bytes(x),
            Endian::Big => u16::from_be_bytes(x),
        }
    }

    fn u32(self, b: &[u8], at: usize) -> u32 {
        let x = field::<4>(b, at);
        match self {
            Endian::Little => u32::from_le_bytes(x),
            Endian::Big => u32::from_be_bytes(x),
        }
    }

    fn u64(self, b: &[u8], at: usize) -> u64 {
        let x = field::<8>(b, at);
        match self {
            Endian::Little => u64::from_le_bytes(x),
            Endian::Big => u64::from_be_bytes(x),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Endian::Little => "little-endian",
            Endian::Big => "big-endian",
        }
    }
}

/// The `W` bytes at `at` of a header buffer. Offsets are constants of the formats inside
/// buffers sized for them, so the zeros returned for a field outside the buffer never occur;
/// they exist so that no offset can panic.
fn field<const W: usize>(b: &[u8], at: usize) -> [u8; W] {
    let mut out = [0; W];
    if let Some(piece) = b.get(at..at.saturating_add(W)) {
        if piece.len() == W {
            out.copy_from_slice(piece);
        }
    }
    out
}

fn check_image(image: &mut Image<'_>, host: &Host) -> Result<(), FileProblem> {
    if image.len == 0 {
        return Err(FileProblem::Empty);
    }
    let mut magic = [0u8; 4];
    let n = image.len.min(4) as usize;
    image.read(0, &mut magic[..n], || "the first bytes".into())?;
    let start = magic[..n]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ");
    let unknown = || FileProblem::UnknownFormat {
        expected: host.format.library(),
        start: start.clone(),
    };
    if n < 4 {
        return Err(unknown());
    }
    match host.format {
        Format::Elf if magic == *b"\x7fELF" => check_elf(image, host),
        Format::MachO => match u32::from_be_bytes(magic) {
            FAT_MAGIC | FAT_MAGIC_64 => check_fat(image, host, magic == FAT_MAGIC_64.to_be_bytes()),
            m if macho_kind(m).is_some() => check_macho(image, 0, image.len, host, ""),
            _ => Err(unknown()),
        },
        Format::Pe if magic[..2] == *b"MZ" => check_pe(image, host),
        _ => Err(unknown()),
    }
}

fn word_size(bits64: bool) -> &'static str {
    if bits64 {
        "64-bit"
    } else {
        "32-bit"
    }
}

fn check_platform(
    format: Format,
    host: &Host,
    bits64: bool,
    endian: Endian,
    machine: u32,
) -> Result<(), FileProblem> {
    let host_endian = if host.little_endian {
        Endian::Little
    } else {
        Endian::Big
    };
    let foreign = |expected: String, found: String| Err(FileProblem::Foreign { expected, found });
    if bits64 != host.bits64 {
        return foreign(
            format!("a {} library", word_size(host.bits64)),
            format!("a {} one", word_size(bits64)),
        );
    }
    if endian != host_endian {
        return foreign(
            format!("a {} library", host_endian.name()),
            format!("a {} one", endian.name()),
        );
    }
    match host.machine {
        Some(expected) if expected != machine => foreign(
            machine_name(format, expected),
            machine_name(format, machine),
        ),
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------------
// ELF: the identification, the file header, every program header, the section header table.
// ---------------------------------------------------------------------------------------------

const ET_DYN: u16 = 3;
const PT_NULL: u32 = 0;
const PT_LOAD: u32 = 1;
const PT_INTERP: u32 = 3;
const PN_XNUM: u16 = 0xffff;

fn segment_type(p_type: u32) -> String {
    match p_type {
        1 => "PT_LOAD".into(),
        2 => "PT_DYNAMIC".into(),
        4 => "PT_NOTE".into(),
        6 => "PT_PHDR".into(),
        7 => "PT_TLS".into(),
        0x6474_e550 => "PT_GNU_EH_FRAME".into(),
        0x6474_e552 => "PT_GNU_RELRO".into(),
        0x6474_e553 => "PT_GNU_PROPERTY".into(),
        other => format!("type {other:#x}"),
    }
}

fn check_elf(image: &mut Image<'_>, host: &Host) -> Result<(), FileProblem> {
    const F: &str = "ELF";
    let mut h = [0u8; 64];
    image.read(0, &mut h[..16], || "the ELF identification".into())?;
    let bits64 = match h[4] {
        1 => false,
        2 => true,
        c => return Err(malformed(F, format!("unknown class {c}"))),
    };
    let e = match h[5] {
        1 => Endian::Little,
        2 => Endian::Big,
        d => return Err(malformed(F, format!("unknown data encoding {d}"))),
    };
    if h[6] != 1 {
        return Err(malformed(F, format!("unknown version {}", h[6])));
    }
    let header_size = if bits64 { 64 } else { 52 };
    image.read(0, &mut h[..header_size], || "the ELF file header".into())?;
    check_platform(Format::Elf, host, bits64, e, u32::from(e.u16(&h, 18)))?;
    let e_type = e.u16(&h, 16);
    if e_type != ET_DYN {
        return Err(FileProblem::NotALibrary(match e_type {
            1 => "a relocatable object file".into(),
            2 => "an executable".into(),
            4 => "a core dump".into(),
            t => format!("an ELF file of type {t:#x}"),
        }));
    }
    // Offsets of the fields that differ between the classes.
    let (phoff, shoff, phentsize, phnum, shentsize, shnum) = if bits64 {
        (
            e.u64(&h, 32),
            e.u64(&h, 40),
            e.u16(&h, 54),
            e.u16(&h, 56),
            e.u16(&h, 58),
            e.u16(&h, 60),
        )
    } else {
        let (phoff, shoff) = (e.u32(&h, 28), e.u32(&h, 32));
        (
            phoff.into(),
            shoff.into(),
            e.u16(&h, 42),
            e.u16(&h, 44),
            e.u16(&h, 46),
            e.u16(&h, 48),
        )
    };
    let (phdr_size, shdr_size) = if bits64 { (56u16, 64u16) } else { (32, 40) };
    if shoff != 0 && shentsize < shdr_size {
        return Err(malformed(
            F,
            format!("section header size {shentsize} < {shdr_size}"),
        ));
    }
    // With more than 0xfffe program headers, the count is in section header 0 (`sh_info`);
    // with zero sections counted, the section count is in its `sh_size`.
    let mut section0 = [0u8; 64];
    if shoff != 0 && (phnum == PN_XNUM || shnum == 0) {
        image.read(shoff, &mut section0[..usize::from(shdr_size)], || {
            "section header 0".into()
        })?;
    }
    let phnum: u64 = if phnum == PN_XNUM {
        if shoff == 0 {
            return Err(malformed(
                F,
                "extended program header count without section header 0",
            ));
        }
        e.u32(&section0, if bits64 { 44 } else { 28 }).into()
    } else {
        phnum.into()
    };
    if phnum == 0 {
        return Err(FileProblem::NotALibrary(
            "an ELF file without program headers".into(),
        ));
    }
    if phentsize < phdr_size {
        return Err(malformed(
            F,
            format!("program header size {phentsize} < {phdr_size}"),
        ));
    }
    let table = phnum.saturating_mul(phentsize.into());
    image.within(phoff, table, image.len, || {
        "the program header table".into()
    })?;
    let mut loads = 0u64;
    let mut p = [0u8; 56];
    for i in 0..phnum {
        let at = phoff + i * u64::from(phentsize);
        image.read(at, &mut p[..usize::from(phdr_size)], || {
            format!("program header {i}")
        })?;
        let (p_type, offset, filesz) = if bits64 {
            (e.u32(&p, 0), e.u64(&p, 8), e.u64(&p, 32))
        } else {
            (e.u32(&p, 0), e.u32(&p, 4).into(), e.u32(&p, 16).into())
        };
        match p_type {
            PT_NULL => continue,
            PT_LOAD => loads += 1,
            // A shared library needs no interpreter; a position-independent executable is an
            // `ET_DYN` file that names one.
            PT_INTERP => {
                return Err(FileProblem::NotALibrary(
                    "a position-independent executable (it names a program interpreter)".into(),
                ))
            }
            _ => {}
        }
        // Every segment's bytes must be in the file: the loader maps the loadable ones and
        // reads the others (notes, the dynamic section) through those mappings.
        image.within(offset, filesz, image.len, || {
            format!("segment {i} ({})", segment_type(p_type))
        })?;
    }
    if loads == 0 {
        return Err(FileProblem::NotALibrary(
            "an ELF file without loadable segments".into(),
        ));
    }
    // The loader does not read section headers, but they are usually the last bytes of the
    // file, so checking them also catches a file cut after its last segment.
    if shoff != 0 {
        let count = if shnum == 0 {
            if bits64 {
                e.u64(&section0, 32)
            } else {
                e.u32(&section0, 20).into()
            }
        } else {
            shnum.into()
        };
        image.within(
            shoff,
            count.saturating_mul(shentsize.into()),
            image.len,
            || "the section header table".into(),
        )?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Mach-O: thin files (the header and every segment load command) and universal ("fat") files
// (the slice for this machine, checked as a thin file).
// ---------------------------------------------------------------------------------------------

const FAT_MAGIC: u32 = 0xcafe_babe;
const FAT_MAGIC_64: u32 = 0xcafe_babf;
const MH_MAGIC: u32 = 0xfeed_face;
const MH_MAGIC_64: u32 = 0xfeed_facf;
const LC_SEGMENT: u32 = 0x1;
const LC_SEGMENT_64: u32 = 0x19;

/// The word size and byte order a thin Mach-O magic number (read big-endian) announces.
fn macho_kind(magic_be: u32) -> Option<(bool, Endian)> {
    match magic_be {
        MH_MAGIC_64 => Some((true, Endian::Big)),
        MH_MAGIC => Some((false, Endian::Big)),
        m if m.swap_bytes() == MH_MAGIC_64 => Some((true, Endian::Little)),
        m if m.swap_bytes() == MH_MAGIC => Some((false, Endian::Little)),
        _ => None,
    }
}

fn check_fat(image: &mut Image<'_>, host: &Host, wide: bool) -> Result<(), FileProblem> {
    const F: &str = "universal Mach-O";
    let mut h = [0u8; 32];
    image.read(0, &mut h[..8], || "the universal header".into())?;
    let count = Endian::Big.u32(&h, 4);
    let entry: u64 = if wide { 32 } else { 20 };
    image.within(8, u64::from(count) * entry, image.len, || {
        "the universal slice table".into()
    })?;
    let mut found = Vec::new();
    for i in 0..u64::from(count) {
        image.read(8 + i * entry, &mut h[..entry as usize], || {
            format!("slice entry {i}")
        })?;
        let cputype = Endian::Big.u32(&h, 0);
        let (offset, size) = if wide {
            (Endian::Big.u64(&h, 8), Endian::Big.u64(&h, 16))
        } else {
            (
                Endian::Big.u32(&h, 8).into(),
                Endian::Big.u32(&h, 12).into(),
            )
        };
        if host.machine == Some(cputype) {
            let name = machine_name(Format::MachO, cputype);
            image.within(offset, size, image.len, || format!("the {name} slice"))?;
            let mut magic = [0u8; 4];
            image.read(offset, &mut magic, || format!("the {name} slice"))?;
            if macho_kind(u32::from_be_bytes(magic)).is_none() {
                return Err(malformed(
                    F,
                    format!("the {name} slice is not a Mach-O file"),
                ));
            }
            return check_macho(
                image,
                offset,
                offset + size,
                host,
                &format!(" of the {name} slice"),
            );
        }
        found.push(machine_name(Format::MachO, cputype));
    }
    Err(FileProblem::Foreign {
        expected: host
            .machine
            .map_or_else(|| "this machine".into(), |m| machine_name(Format::MachO, m)),
        found: format!(
            "a universal library with slices for [{}] only",
            found.join(", ")
        ),
    })
}

/// Checks the thin Mach-O file in bytes `base..limit` (`in_slice` names the slice in
/// messages).
fn check_macho(
    image: &mut Image<'_>,
    base: u64,
    limit: u64,
    host: &Host,
    in_slice: &str,
) -> Result<(), FileProblem> {
    const F: &str = "Mach-O";
    let mut h = [0u8; 72];
    image.read(base, &mut h[..4], || format!("the Mach-O header{in_slice}"))?;
    let Some((bits64, e)) = macho_kind(Endian::Big.u32(&h, 0)) else {
        return Err(malformed(F, "bad magic number"));
    };
    let header_size: u64 = if bits64 { 32 } else { 28 };
    image.within(base, header_size, limit, || {
        format!("the Mach-O header{in_slice}")
    })?;
    image.read(base, &mut h[..header_size as usize], || {
        format!("the Mach-O header{in_slice}")
    })?;
    check_platform(Format::MachO, host, bits64, e, e.u32(&h, 4))?;
    match e.u32(&h, 12) {
        // MH_DYLIB, MH_BUNDLE
        6 | 8 => {}
        2 => return Err(FileProblem::NotALibrary("an executable".into())),
        1 => return Err(FileProblem::NotALibrary("an object file".into())),
        t => {
            return Err(FileProblem::NotALibrary(format!(
                "a Mach-O file of type {t}"
            )))
        }
    }
    let (ncmds, sizeofcmds) = (e.u32(&h, 16), u64::from(e.u32(&h, 20)));
    let commands = base + header_size;
    image.within(commands, sizeofcmds, limit, || {
        format!("the load commands{in_slice}")
    })?;
    let (segment_cmd, segment_size) = if bits64 {
        (LC_SEGMENT_64, 72u32)
    } else {
        (LC_SEGMENT, 56)
    };
    let mut offset = 0u64;
    let mut segments = 0u32;
    for i in 0..ncmds {
        if offset + 8 > sizeofcmds {
            return Err(malformed(
                F,
                format!("load command {i} starts past sizeofcmds"),
            ));
        }
        image.read(commands + offset, &mut h[..8], || {
            format!("load command {i}{in_slice}")
        })?;
        let (cmd, cmdsize) = (e.u32(&h, 0), e.u32(&h, 4));
        if cmdsize < 8 || offset + u64::from(cmdsize) > sizeofcmds {
            return Err(malformed(F, format!("load command {i} has size {cmdsize}")));
        }
        if cmd == segment_cmd {
            if cmdsize < segment_size {
                return Err(malformed(
                    F,
                    format!("segment command {i} has size {cmdsize}"),
                ));
            }
            image.read(commands + offset, &mut h[..segment_size as usize], || {
                format!("segment command {i}{in_slice}")
            })?;
            let (fileoff, filesize) = if bits64 {
                (e.u64(&h, 40), e.u64(&h, 48))
            } else {
                (e.u32(&h, 32).into(), e.u32(&h, 36).into())
            };
            let name = String::from_utf8_lossy(&h[8..24])
                .trim_end_matches('\0')
                .to_string();
            image.within(base.saturating_add(fileoff), filesize, limit, || {
                format!("segment {name}{in_slice}")
            })?;
            segments += 1;
        }
        offset += u64::from(cmdsize);
    }
    if segments == 0 {
        return Err(FileProblem::NotALibrary(
            "a Mach-O file without segments".into(),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// PE: the MS-DOS stub's pointer, the COFF header, the optional header, every section.
// ---------------------------------------------------------------------------------------------

const IMAGE_FILE_DLL: u16 = 0x2000;

fn check_pe(image: &mut Image<'_>, host: &Host) -> Result<(), FileProblem> {
    const F: &str = "PE";
    let mut h = [0u8; 64];
    image.read(0, &mut h, || "the MS-DOS header".into())?;
    let pe = u64::from(Endian::Little.u32(&h, 0x3c));
    image.read(pe, &mut h[..26], || "the PE header".into())?;
    if h[..4] != *b"PE\0\0" {
        return Err(malformed(
            F,
            "no PE signature where the MS-DOS header points",
        ));
    }
    let le = Endian::Little;
    let (machine, sections, optional_size, flags) =
        (le.u16(&h, 4), le.u16(&h, 6), le.u16(&h, 20), le.u16(&h, 22));
    let bits64 = match le.u16(&h, 24) {
        0x20b => true,
        0x10b => false,
        m => {
            return Err(malformed(
                F,
                format!("unknown optional header magic {m:#x}"),
            ))
        }
    };
    check_platform(Format::Pe, host, bits64, Endian::Little, machine.into())?;
    if flags & IMAGE_FILE_DLL == 0 {
        return Err(FileProblem::NotALibrary("an executable".into()));
    }
    if optional_size < 64 {
        return Err(malformed(
            F,
            format!("optional header of {optional_size} bytes"),
        ));
    }
    let optional = pe + 24;
    image.read(optional, &mut h, || "the optional header".into())?;
    image.within(0, le.u32(&h, 60).into(), image.len, || {
        "the headers (SizeOfHeaders)".into()
    })?;
    if sections == 0 {
        return Err(malformed(F, "no sections"));
    }
    let table = optional + u64::from(optional_size);
    let mut s = [0u8; 40];
    for i in 0..u64::from(sections) {
        image.read(table + i * 40, &mut s, || format!("section header {i}"))?;
        let (size, pointer) = (le.u32(&s, 16), le.u32(&s, 20));
        let name = String::from_utf8_lossy(&s[..8])
            .trim_end_matches('\0')
            .to_string();
        image.within(pointer.into(), size.into(), image.len, || {
            format!("section {i} ({name})")
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const X86_64_ELF: Host = Host {
        format: Format::Elf,
        bits64: true,
        little_endian: true,
        machine: Some(62),
    };

    /// Writes `value` as `width` bytes at `at` of `buf`, in the given byte order.
    fn put(buf: &mut [u8], at: usize, width: usize, value: u64, big: bool) {
        let bytes = value.to_le_bytes();
        for i in 0..width {
            buf[at + i] = if big { bytes[width - 1 - i] } else { bytes[i] };
        }
    }

    /// A synthetic ELF file: the header, the program headers right after it, and a section
    /// header table at `shoff` (when nonzero) of `shnum` entries; `len` bytes in all.
    #[derive(Clone, Debug)]
    struct Elf {
        bits64: bool,
        big: bool,
        e_type: u16,
        machine: u16,
        segments: Vec<(u32, u64, u64)>,
        shoff: u64,
        shnum: u16,
        len: usize,
    }

    impl Elf {
        fn library(segments: Vec<(u32, u64, u64)>, len: usize) -> Elf {
            Elf {
                bits64: true,
                big: false,
                e_type: 3,
                machine: 62,
                segments,
                shoff: 0,
                shnum: 0,
                len,
            }
        }

        fn header_size(&self) -> usize {
            if self.bits64 {
                64
            } else {
                52
            }
        }

        fn phentsize(&self) -> usize {
            if self.bits64 {
                56
            } else {
                32
            }
        }

        fn bytes(&self) -> Vec<u8> {
            let table_end = self.header_size() + self.segments.len() * self.phentsize();
            let mut b = vec![0u8; self.len.max(table_end)];
            b[..4].copy_from_slice(b"\x7fELF");
            b[4] = if self.bits64 { 2 } else { 1 };
            b[5] = if self.big { 2 } else { 1 };
            b[6] = 1;
            let big = self.big;
            put(&mut b, 16, 2, self.e_type.into(), big);
            put(&mut b, 18, 2, self.machine.into(), big);
            let phoff = self.header_size() as u64;
            let n = self.segments.len() as u64;
            if self.bits64 {
                put(&mut b, 32, 8, phoff, big);
                put(&mut b, 40, 8, self.shoff, big);
                put(&mut b, 54, 2, 56, big);
                put(&mut b, 56, 2, n, big);
                put(&mut b, 58, 2, 64, big);
                put(&mut b, 60, 2, self.shnum.into(), big);
            } else {
                put(&mut b, 28, 4, phoff, big);
                put(&mut b, 32, 4, self.shoff, big);
                put(&mut b, 42, 2, 32, big);
                put(&mut b, 44, 2, n, big);
                put(&mut b, 46, 2, 40, big);
                put(&mut b, 48, 2, self.shnum.into(), big);
            }
            for (i, &(p_type, offset, filesz)) in self.segments.iter().enumerate() {
                let at = self.header_size() + i * self.phentsize();
                put(&mut b, at, 4, p_type.into(), big);
                if self.bits64 {
                    put(&mut b, at + 8, 8, offset, big);
                    put(&mut b, at + 32, 8, filesz, big);
                } else {
                    put(&mut b, at + 4, 4, offset, big);
                    put(&mut b, at + 16, 4, filesz, big);
                }
            }
            b.truncate(self.len);
            b
        }
    }

    fn problem(bytes: &[u8], host: &Host) -> FileProblem {
        check_library_bytes(bytes, host).unwrap_err()
    }

    #[test]
    fn a_well_formed_elf_library_passes() {
        let elf = Elf::library(vec![(1, 0, 400), (1, 400, 100), (2, 400, 16)], 600);
        assert_eq!(check_library_bytes(&elf.bytes(), &X86_64_ELF), Ok(()));
    }

    #[test]
    fn a_segment_past_the_end_is_a_truncation_naming_it() {
        let elf = Elf::library(vec![(1, 0, 400), (1, 400, 300)], 600);
        assert_eq!(
            problem(&elf.bytes(), &X86_64_ELF),
            FileProblem::Truncated {
                what: "segment 1 (PT_LOAD)".into(),
                start: 400,
                end: 700,
                len: 600
            }
        );
        assert_eq!(
            problem(&elf.bytes(), &X86_64_ELF).to_string(),
            "segment 1 (PT_LOAD) (bytes 400..700) extends past the end of the file (600 bytes); \
             the file is truncated"
        );
    }

    #[test]
    fn the_section_header_table_must_be_inside_the_file() {
        let mut elf = Elf::library(vec![(1, 0, 400)], 600);
        elf.shoff = 500;
        elf.shnum = 2;
        assert!(matches!(
            problem(&elf.bytes(), &X86_64_ELF),
            FileProblem::Truncated { ref what, start: 500, end: 628, .. }
                if what == "the section header table"
        ));
        elf.len = 628;
        assert_eq!(check_library_bytes(&elf.bytes(), &X86_64_ELF), Ok(()));
    }

    #[test]
    fn foreign_elf_files_are_named_as_such() {
        let mut elf = Elf::library(vec![(1, 0, 100)], 200);
        elf.machine = 183;
        assert_eq!(
            problem(&elf.bytes(), &X86_64_ELF).to_string(),
            "built for aarch64 (machine 0xb7), but this process needs x86_64 (machine 0x3e)"
        );
        let mut elf = Elf::library(vec![(1, 0, 100)], 200);
        elf.bits64 = false;
        assert!(matches!(
            problem(&elf.bytes(), &X86_64_ELF),
            FileProblem::Foreign { .. }
        ));
        let mut elf = Elf::library(vec![(1, 0, 100)], 200);
        elf.big = true;
        assert_eq!(
            problem(&elf.bytes(), &X86_64_ELF).to_string(),
            "built for a big-endian one, but this process needs a little-endian library"
        );
        // The same big-endian file is right for a big-endian host.
        let host = Host {
            little_endian: false,
            ..X86_64_ELF
        };
        assert_eq!(check_library_bytes(&elf.bytes(), &host), Ok(()));
    }

    #[test]
    fn executables_and_other_objects_are_not_libraries() {
        let mut elf = Elf::library(vec![(1, 0, 100)], 200);
        elf.e_type = 2;
        assert_eq!(
            problem(&elf.bytes(), &X86_64_ELF),
            FileProblem::NotALibrary("an executable".into())
        );
        let pie = Elf::library(vec![(6, 64, 168), (3, 232, 28), (1, 0, 300)], 300);
        assert!(matches!(
            problem(&pie.bytes(), &X86_64_ELF),
            FileProblem::NotALibrary(ref what) if what.contains("position-independent executable")
        ));
        let no_load = Elf::library(vec![(2, 0, 100)], 200);
        assert!(matches!(
            problem(&no_load.bytes(), &X86_64_ELF),
            FileProblem::NotALibrary(_)
        ));
    }

    #[test]
    fn short_empty_and_unknown_files() {
        assert_eq!(problem(b"", &X86_64_ELF), FileProblem::Empty);
        assert_eq!(
            problem(b"not a library", &X86_64_ELF).to_string(),
            "not an ELF shared library (the file starts with bytes 6e 6f 74 20)"
        );
        assert!(matches!(
            problem(b"\x7fE", &X86_64_ELF),
            FileProblem::UnknownFormat { .. }
        ));
        assert!(matches!(
            problem(b"\x7fELF\x02\x01\x01", &X86_64_ELF),
            FileProblem::Truncated { ref what, .. } if what == "the ELF identification"
        ));
        let elf = Elf::library(vec![(1, 0, 100)], 200).bytes();
        assert!(matches!(
            problem(&elf[..40], &X86_64_ELF),
            FileProblem::Truncated { ref what, .. } if what == "the ELF file header"
        ));
    }

    #[test]
    fn paths_that_are_not_regular_files_are_refused() {
        assert_eq!(
            check_library_file(Path::new("")),
            Err(FileProblem::EmptyPath)
        );
        let dir = std::env::temp_dir();
        assert_eq!(
            check_library_file(&dir),
            Err(FileProblem::NotAFile("a directory"))
        );
        assert!(matches!(
            check_library_file(&dir.join("quabla-no-such-file-anywhere")),
            Err(FileProblem::Io(_))
        ));
        #[cfg(unix)]
        assert_eq!(
            check_library_file(Path::new("/dev/null")),
            Err(FileProblem::NotAFile("a character device"))
        );
        let empty = dir.join(format!("quabla-empty-{}", std::process::id()));
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(check_library_file(&empty), Err(FileProblem::Empty));
        std::fs::remove_file(&empty).unwrap();
    }

    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    fn the_file_reader_agrees_with_the_byte_reader() {
        let path = std::env::temp_dir().join(format!("quabla-elf-{}", std::process::id()));
        let good = Elf::library(vec![(1, 0, 400)], 600).bytes();
        std::fs::write(&path, &good).unwrap();
        assert_eq!(check_library_file(&path), Ok(()));
        std::fs::write(&path, &good[..300]).unwrap();
        assert_eq!(
            check_library_file(&path),
            check_library_bytes(&good[..300], &Host::current())
        );
        std::fs::remove_file(&path).unwrap();
    }

    // --- Mach-O -------------------------------------------------------------------------

    const ARM64_MACOS: Host = Host {
        format: Format::MachO,
        bits64: true,
        little_endian: true,
        machine: Some(0x0100_000c),
    };

    /// A thin 64-bit little-endian Mach-O file with one LC_SEGMENT_64 per `(fileoff,
    /// filesize)` and an unrelated load command first.
    fn macho(cputype: u32, filetype: u32, segments: &[(u64, u64)], len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len.max(32 + 16 + 72 * segments.len())];
        put(&mut b, 0, 4, 0xfeed_facf, false);
        put(&mut b, 4, 4, cputype.into(), false);
        put(&mut b, 12, 4, filetype.into(), false);
        put(&mut b, 16, 4, 1 + segments.len() as u64, false);
        put(&mut b, 20, 4, 16 + 72 * segments.len() as u64, false);
        // LC_UUID, 16 bytes (its payload is not read).
        put(&mut b, 32, 4, 0x1b, false);
        put(&mut b, 36, 4, 16, false);
        for (i, &(fileoff, filesize)) in segments.iter().enumerate() {
            let at = 48 + 72 * i;
            put(&mut b, at, 4, 0x19, false);
            put(&mut b, at + 4, 4, 72, false);
            b[at + 8..at + 14].copy_from_slice(b"__TEXT");
            put(&mut b, at + 40, 8, fileoff, false);
            put(&mut b, at + 48, 8, filesize, false);
        }
        b.truncate(len);
        b
    }

    #[test]
    fn mach_o_segments_are_checked() {
        let good = macho(0x0100_000c, 6, &[(0, 300), (300, 100)], 400);
        assert_eq!(check_library_bytes(&good, &ARM64_MACOS), Ok(()));
        let cut = macho(0x0100_000c, 6, &[(0, 300), (300, 200)], 400);
        assert_eq!(
            problem(&cut, &ARM64_MACOS),
            FileProblem::Truncated {
                what: "segment __TEXT".into(),
                start: 300,
                end: 500,
                len: 400
            }
        );
        let x86 = macho(0x0100_0007, 6, &[(0, 300)], 400);
        assert_eq!(
            problem(&x86, &ARM64_MACOS).to_string(),
            "built for x86_64 (machine 0x1000007), but this process needs aarch64 (machine \
             0x100000c)"
        );
        let exe = macho(0x0100_000c, 2, &[(0, 300)], 400);
        assert_eq!(
            problem(&exe, &ARM64_MACOS),
            FileProblem::NotALibrary("an executable".into())
        );
        // An ELF library is not what a Mach-O host loads.
        let elf = Elf::library(vec![(1, 0, 100)], 200).bytes();
        assert!(matches!(
            problem(&elf, &ARM64_MACOS),
            FileProblem::UnknownFormat { .. }
        ));
    }

    /// A universal file of two slices (x86_64, then arm64) of `slice` each.
    fn fat(slice: &[u8], len: usize) -> Vec<u8> {
        let mut b = vec![0u8; 4096 * 3];
        put(&mut b, 0, 4, 0xcafe_babe, true);
        put(&mut b, 4, 4, 2, true);
        for (i, cputype) in [0x0100_0007u64, 0x0100_000c].iter().enumerate() {
            let at = 8 + 20 * i;
            put(&mut b, at, 4, *cputype, true);
            put(&mut b, at + 8, 4, 4096 * (i as u64 + 1), true);
            put(&mut b, at + 12, 4, slice.len() as u64, true);
            b[4096 * (i + 1)..4096 * (i + 1) + slice.len()].copy_from_slice(slice);
        }
        b.truncate(len);
        b
    }

    #[test]
    fn universal_mach_o_files_are_checked_in_the_slice_of_this_machine() {
        let slice = macho(0x0100_000c, 6, &[(0, 300)], 400);
        assert_eq!(
            check_library_bytes(&fat(&slice, 8192 + 400), &ARM64_MACOS),
            Ok(())
        );
        assert!(matches!(
            problem(&fat(&slice, 8192 + 200), &ARM64_MACOS),
            FileProblem::Truncated { ref what, .. } if what.contains("slice")
        ));
        let riscv = Host {
            machine: Some(0x0100_00ff),
            ..ARM64_MACOS
        };
        assert!(matches!(
            problem(&fat(&slice, 8192 + 400), &riscv),
            FileProblem::Foreign { ref found, .. } if found.contains("x86_64") && found.contains("aarch64")
        ));
    }

    // --- PE -----------------------------------------------------------------------------

    const X86_64_WINDOWS: Host = Host {
        format: Format::Pe,
        bits64: true,
        little_endian: true,
        machine: Some(0x8664),
    };

    /// A PE32+ file: MS-DOS header pointing at 0x80, the COFF header, a 240-byte optional
    /// header, and one section header per `(pointer, size)`.
    fn pe(machine: u16, characteristics: u16, sections: &[(u32, u32)], len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len.max(0x80 + 24 + 240 + 40 * sections.len())];
        b[..2].copy_from_slice(b"MZ");
        put(&mut b, 0x3c, 4, 0x80, false);
        b[0x80..0x84].copy_from_slice(b"PE\0\0");
        put(&mut b, 0x84, 2, machine.into(), false);
        put(&mut b, 0x86, 2, sections.len() as u64, false);
        put(&mut b, 0x94, 2, 240, false);
        put(&mut b, 0x96, 2, characteristics.into(), false);
        put(&mut b, 0x98, 2, 0x20b, false);
        put(&mut b, 0x98 + 60, 4, 0x400, false);
        for (i, &(pointer, size)) in sections.iter().enumerate() {
            let at = 0x98 + 240 + 40 * i;
            b[at..at + 5].copy_from_slice(b".text");
            put(&mut b, at + 16, 4, size.into(), false);
            put(&mut b, at + 20, 4, pointer.into(), false);
        }
        b.truncate(len);
        b
    }

    #[test]
    fn pe_sections_are_checked() {
        let good = pe(0x8664, 0x2022, &[(0x400, 0x200), (0x600, 0x200)], 0x800);
        assert_eq!(check_library_bytes(&good, &X86_64_WINDOWS), Ok(()));
        assert_eq!(
            problem(&good[..0x700], &X86_64_WINDOWS),
            FileProblem::Truncated {
                what: "section 1 (.text)".into(),
                start: 0x600,
                end: 0x800,
                len: 0x700
            }
        );
        let exe = pe(0x8664, 0x0022, &[(0x400, 0x200)], 0x800);
        assert_eq!(
            problem(&exe, &X86_64_WINDOWS),
            FileProblem::NotALibrary("an executable".into())
        );
        let arm = pe(0xaa64, 0x2022, &[(0x400, 0x200)], 0x800);
        assert!(matches!(
            problem(&arm, &X86_64_WINDOWS),
            FileProblem::Foreign { .. }
        ));
    }

    // --- Properties ---------------------------------------------------------------------

    fn hosts() -> [Host; 3] {
        [X86_64_ELF, ARM64_MACOS, X86_64_WINDOWS]
    }

    /// Whether every segment of a synthetic ELF file lies inside its first `len` bytes.
    fn segments_inside(elf: &Elf, len: u64) -> bool {
        elf.segments
            .iter()
            .all(|&(t, offset, size)| t == 0 || offset.checked_add(size).is_some_and(|e| e <= len))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Synthetic ELF libraries pass exactly when their segments lie inside the file.
        #[test]
        fn synthetic_elf_files_pass_exactly_when_their_segments_fit(
            segments in proptest::collection::vec(
                (prop_oneof![Just(1u32), Just(2), Just(4), Just(0x6474_e551)], 0u64..2000, 0u64..2000),
                1..8,
            ),
            len in 500usize..3000,
            bits64 in any::<bool>(),
            big in any::<bool>(),
        ) {
            let mut segments = segments;
            segments[0].0 = 1; // at least one PT_LOAD
            let elf = Elf { bits64, big, ..Elf::library(segments, len) };
            let host = Host { bits64, little_endian: !big, ..X86_64_ELF };
            let bytes = elf.bytes();
            let result = check_library_bytes(&bytes, &host);
            let fits = bytes.len() >= elf.header_size() + elf.segments.len() * elf.phentsize()
                && segments_inside(&elf, bytes.len() as u64);
            prop_assert_eq!(result.is_ok(), fits, "{:?}", result);
        }

        /// Every truncation that cuts a segment is refused.
        #[test]
        fn truncations_that_cut_a_segment_are_refused(cut in 0usize..1100) {
            // The last segment ends at the end of the file, so every cut cuts a segment.
            let elf = Elf::library(vec![(1, 0, 700), (1, 700, 400), (4, 1000, 100)], 1100);
            let bytes = elf.bytes();
            let result = check_library_bytes(&bytes[..cut], &X86_64_ELF);
            prop_assert!(result.is_err());
        }

        /// Arbitrary bytes, and mutations of valid files of every format, never panic, on any
        /// host; an accepted mutation of the ELF file still has its segments inside the file.
        #[test]
        fn no_bytes_make_the_check_panic(
            noise in proptest::collection::vec(any::<u8>(), 0..600),
            flips in proptest::collection::vec((0usize..2048, 0u8..8), 1..6),
            prefix in 0usize..5,
        ) {
            for host in hosts() {
                let _ = check_library_bytes(&noise, &host);
            }
            let elf = Elf::library(vec![(1, 0, 700), (1, 700, 300)], 1000);
            let slice = macho(0x0100_000c, 6, &[(0, 300)], 400);
            let magics: [&[u8]; 5] = [b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe", b"MZ", b"\xfe\xed\xfa\xce"];
            let mut noisy = magics[prefix].to_vec();
            noisy.extend_from_slice(&noise);
            let files = [
                elf.bytes(),
                macho(0x0100_000c, 6, &[(0, 300), (300, 100)], 400),
                fat(&slice, 8192 + 400),
                pe(0x8664, 0x2022, &[(0x400, 0x200)], 0x600),
                noisy,
            ];
            for (k, file) in files.iter().enumerate() {
                let mut file = file.clone();
                for &(at, bit) in &flips {
                    let len = file.len().max(1);
                    if let Some(byte) = file.get_mut(at % len) {
                        *byte ^= 1 << bit;
                    }
                }
                for host in hosts() {
                    let result = check_library_bytes(&file, &host);
                    if k == 0 && host == X86_64_ELF && result.is_ok() {
                        prop_assert!(elf_loads_inside(&file));
                    }
                }
            }
        }
    }

    /// An independent reading of a 64-bit little-endian ELF file: whether every PT_LOAD
    /// segment lies inside it (what the loader needs).
    fn elf_loads_inside(b: &[u8]) -> bool {
        let u = |at: usize, w: usize| -> Option<u64> {
            let s = b.get(at..at + w)?;
            Some(s.iter().rev().fold(0u64, |acc, &x| acc << 8 | u64::from(x)))
        };
        let (Some(phoff), Some(phentsize), Some(phnum)) = (u(32, 8), u(54, 2), u(56, 2)) else {
            return false;
        };
        (0..phnum).all(|i| {
            let at = phoff + i * phentsize;
            let Ok(at) = usize::try_from(at) else {
                return false;
            };
            match (u(at, 4), u(at + 8, 8), u(at + 32, 8)) {
                (Some(1), Some(offset), Some(size)) => offset
                    .checked_add(size)
                    .is_some_and(|e| e <= b.len() as u64),
                (Some(_), Some(_), Some(_)) => true,
                _ => false,
            }
        })
    }
}
