use super::*;

#[test]
fn decoding_slots_feed_one_and_prompts_share_the_budget_first_come_first_served() {
    let work = |admitted, pending| Some(Work { admitted, pending });
    let mut sharer = Sharer::default();
    // Slot 0 was admitted last, slot 3 first; slot 1 decodes, slot 2 is idle.
    let shared = sharer.share([work(7, 300), work(1, 1), None, work(5, 400)], 512);
    assert_eq!(
        shared,
        Shared {
            decoding: 1,
            prompt_tokens: 512
        }
    );
    assert_eq!(sharer.fed(), [112, 1, 0, 400]);
}
