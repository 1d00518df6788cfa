//! SQL `text` as PostgreSQL holds it: bytes in the server's encoding, which
//! need not be UTF-8. pgrx's `&str` and `String` assume UTF-8: as an
//! argument in a LATIN1 or EUC database they raise an internal error
//! (XX000) before the function runs, and names read from the catalogs as
//! `String` come out garbled. Arguments and view columns that may carry
//! such bytes use this type instead; in SQL it is plain `text`.

use std::ffi::{c_char, CStr};

use pgrx::callconv::{Arg, ArgAbi, BoxRet, FcInfo};
use pgrx::datum::Datum;
use pgrx::nullable::Nullable;
use pgrx::{pg_sys, FromDatum, IntoDatum};

/// Text in the server's encoding, kept as its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerText(pub Vec<u8>);

impl ServerText {
    /// A copy of a NUL-terminated C string (a name from the catalogs, an
    /// activity field); `None` for NULL.
    ///
    /// # Safety
    /// `p` must be NULL or point to a NUL-terminated string.
    pub unsafe fn from_c(p: *const c_char) -> Option<Self> {
        // SAFETY: the caller's promise.
        (!p.is_null()).then(|| ServerText(unsafe { CStr::from_ptr(p) }.to_bytes().to_vec()))
    }

    /// The text, where it is ASCII: the same in every server encoding.
    pub fn ascii(&self) -> Option<&str> {
        self.0.is_ascii().then(|| std::str::from_utf8(&self.0).ok()).flatten()
    }
}

impl FromDatum for ServerText {
    unsafe fn from_polymorphic_datum(datum: pg_sys::Datum, is_null: bool, typoid: pg_sys::Oid) -> Option<Self> {
        // SAFETY: `text` is a varlena, as `bytea` is: pgrx's byte conversion
        // detoasts it and reads its bytes without looking at them.
        unsafe { <&[u8]>::from_polymorphic_datum(datum, is_null, typoid) }.map(|b| ServerText(b.to_vec()))
    }
}

// SAFETY: the argument is read by `FromDatum` above, as pgrx reads its own
// `&[u8]` and `String` arguments; NULL is `None` (or `Nullable::Null`).
unsafe impl<'fcx> ArgAbi<'fcx> for ServerText {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        // SAFETY: the function is declared with a `text` argument here.
        unsafe { arg.unbox_arg_using_from_datum() }.unwrap_or_else(|| panic!("argument {index} must not be null"))
    }

    unsafe fn unbox_nullable_arg(arg: Arg<'_, 'fcx>) -> Nullable<Self> {
        // SAFETY: as above.
        unsafe { arg.unbox_arg_using_from_datum() }.into()
    }
}

impl IntoDatum for ServerText {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        // A `text` datum is built as a `bytea` one: a varlena of the bytes.
        self.0.as_slice().into_datum()
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::TEXTOID
    }
}

// SAFETY: the datum is built by `IntoDatum` above and returned at once, as
// pgrx returns its own `Vec<u8>` and `String`.
unsafe impl BoxRet for ServerText {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
        match self.into_datum() {
            // SAFETY: a fresh `text` datum, for a function returning `text`.
            Some(datum) => unsafe { fcinfo.return_raw_datum(datum) },
            None => fcinfo.return_null(),
        }
    }
}

pgrx::impl_sql_translatable!(ServerText, "TEXT");
