//! Whether an empty CPA account listing is believed (docs/decisions.md §2: an empty listing while
//! accounts are known is not believed — CPA may list nothing yet — until it repeats three times).
//! Pure counter; the jobs keep one per site.

/// Empty listings in a row, while accounts were known, after which an empty listing is believed.
pub const EMPTY_LISTINGS_BELIEVED_AFTER: u32 = 3;

/// Empty listings in a row while accounts were known.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct EmptyListings {
    in_a_row: u32,
}

impl EmptyListings {
    /// Counts an empty listing; `true` once [`EMPTY_LISTINGS_BELIEVED_AFTER`] came in a row
    /// (this one included): the listing is then believed.
    pub fn note_empty(&mut self) -> bool {
        self.in_a_row = self.in_a_row.saturating_add(1);
        self.in_a_row >= EMPTY_LISTINGS_BELIEVED_AFTER
    }

    /// A non-empty listing arrived: the count starts again.
    pub fn note_filled(&mut self) {
        self.in_a_row = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_listing_is_believed_from_the_third_in_a_row() {
        // (listings in order: true = empty, whether the last empty one is believed)
        let table: [(&[bool], bool); 6] = [
            (&[true], false),
            (&[true, true], false),
            (&[true, true, true], true),
            (&[true, true, true, true], true),
            (&[true, true, false, true], false),
            (&[true, false, true, true, true], true),
        ];
        for (listings, believed) in table {
            let mut c = EmptyListings::default();
            let mut last = false;
            for &empty in listings {
                if empty {
                    last = c.note_empty();
                } else {
                    c.note_filled();
                }
            }
            assert_eq!(last, believed, "{listings:?}");
        }
    }
}
