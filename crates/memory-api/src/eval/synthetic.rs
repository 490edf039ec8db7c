//! A conversational data set the repository generates itself
//! (`claw memory eval --synthetic`, and a CI test): half a year of everyday
//! sessions with one assistant, every fourth day from January to the end of June,
//! with facts planted in some of them and asked about in paraphrase on 1 July.
//! Deterministic: the same sessions and questions on every run.
//!
//! The filler is small talk drawn from templates that share words with the
//! questions (a sister who calls, a garage that is tidied, a lunch with the
//! manager), so a question's words alone do not find its turn. The kinds:
//! `fact` (said once, asked in other words), `temporal` (a day, a relative time
//! or a month names which of two similar turns is meant; or "when did I …"),
//! `multi` (two turns of different sessions together answer it) and `inference`
//! (the answer follows from what was said).
#![warn(missing_docs)]

use super::conversations::{
    ConvDataset, ConvQuestion, Conversation, Exchange, Session, TurnRef, session_start,
};
use chrono::{Duration, NaiveDate};

/// A planted fact: what was said on which day, and the question about it.
struct Plant {
    /// Question id and kind.
    id: &'static str,
    kind: &'static str,
    question: &'static str,
    /// The exchanges planted (day, user, assistant): evidence, but for `distractors`.
    turns: &'static [(&'static str, &'static str, &'static str)],
    /// Indices into `turns` that are distractors (said, but not the answer).
    distractors: &'static [usize],
    /// Whether the evidence is the assistant's answer (else the user's message).
    assistant: bool,
}

const PLANTS: &[Plant] = &[
    // --- facts, asked in other words
    Plant {
        id: "syn-sister-city",
        kind: "fact",
        question: "Which city did my sibling relocate to?",
        turns: &[(
            "2026-01-17",
            "My sister Ingrid has moved to Tromsø, she starts at the university hospital there next month.",
            "That's a big move north! I hope she settles in well.",
        )],
        distractors: &[],
        assistant: false,
    },
    Plant {
        id: "syn-pet-name",
        kind: "fact",
        question: "What is the name of the animal I adopted?",
        turns: &[(
            "2026-02-02",
            "We brought the grey rescue cat home from the shelter, we're calling him Pepper.",
            "Welcome home, Pepper! Grey cats are the best.",
        )],
        distractors: &[],
        assistant: false,
    },
    Plant {
        id: "syn-landlord",
        kind: "fact",
        question: "What did the owner of my flat promise to repair?",
        turns: &[(
            "2026-02-22",
            "Our landlord finally agreed to replace the leaking boiler before next winter.",
            "Good news, a leaking boiler is no fun in the cold months.",
        )],
        distractors: &[],
        assistant: false,
    },
    Plant {
        id: "syn-allergy",
        kind: "fact",
        question: "Which antibiotic am I allergic to?",
        turns: &[(
            "2026-03-11",
            "The doctor confirmed the rash was a reaction to penicillin, so no more of that for me.",
            "Good to know. Make sure it's noted in your medical records.",
        )],
        distractors: &[],
        assistant: false,
    },
    Plant {
        id: "syn-flight-book",
        kind: "fact",
        question: "What novel did you suggest I read on the plane?",
        turns: &[(
            "2026-03-27",
            "Can you suggest something to read on my flight to Montreal?",
            "Try The Remains of the Day by Kazuo Ishiguro: quiet, funny and beautifully written.",
        )],
        distractors: &[],
        assistant: true,
    },
    Plant {
        id: "syn-bike-price",
        kind: "fact",
        question: "How much did my new bicycle cost?",
        turns: &[(
            "2026-04-12",
            "I bought a second-hand green touring bike today, paid 600 euros for it.",
            "A touring bike for 600 is a good deal if the frame is sound.",
        )],
        distractors: &[],
        assistant: false,
    },
    Plant {
        id: "syn-offsite",
        kind: "fact",
        question: "Where will our company retreat take place?",
        turns: &[(
            "2026-04-24",
            "The team offsite is going to be in Porto this year and I'm organising the dinner.",
            "Porto is a lovely choice. Book the restaurant early!",
        )],
        distractors: &[],
        assistant: false,
    },
    Plant {
        id: "syn-cello-teacher",
        kind: "fact",
        question: "Who gives me my music lessons?",
        turns: &[(
            "2026-05-06",
            "First cello lesson today with Mr. Haddad, my fingers are sore but I loved it.",
            "Sore fingers mean you're practising. Mr. Haddad sounds patient.",
        )],
        distractors: &[],
        assistant: false,
    },
    Plant {
        id: "syn-knee",
        kind: "fact",
        question: "Which exercises did you advise for my sore knee?",
        turns: &[(
            "2026-05-22",
            "My knee hurts after running downhill, what can I do about it?",
            "Try quad sets, straight-leg raises and gentle hamstring stretches twice a day, and rest from downhill runs for a week.",
        )],
        distractors: &[],
        assistant: true,
    },
    Plant {
        id: "syn-blood-pressure",
        kind: "fact",
        question: "What were my readings at the last check-up?",
        turns: &[(
            "2026-06-11",
            "At the check-up the nurse measured my blood pressure: 128 over 82.",
            "That's slightly elevated but nothing alarming. Keep an eye on it.",
        )],
        distractors: &[],
        assistant: false,
    },
    // --- temporal: a day or a relative time picks one of two similar turns
    Plant {
        id: "syn-garage-march",
        kind: "temporal",
        question: "What did I tell you on March 3rd about the garage?",
        turns: &[
            (
                "2026-03-03",
                "The garage door jammed again this morning, a repairman called Tomasz is coming on Friday.",
                "Hopefully Tomasz can fix it for good this time.",
            ),
            (
                "2026-04-20",
                "Spent the whole afternoon tidying the garage and sorting the tools.",
                "A tidy garage feels great. Did you find anything you'd lost?",
            ),
        ],
        distractors: &[1],
        assistant: false,
    },
    Plant {
        id: "syn-lunch-may",
        kind: "temporal",
        question: "Who did I have lunch with on May 14th?",
        turns: &[
            (
                "2026-05-14",
                "Had lunch with my old colleague Priya at the Lebanese place near the station.",
                "Catching up with old colleagues is always nice. How is Priya doing?",
            ),
            (
                "2026-02-10",
                "Had lunch with my manager in the canteen, mostly talked about the budget.",
                "Canteen lunches with the manager, the classic.",
            ),
        ],
        distractors: &[1],
        assistant: false,
    },
    Plant {
        id: "syn-passport-last-week",
        kind: "temporal",
        question: "What paperwork did I sort out last week?",
        turns: &[
            (
                "2026-06-23",
                "Finally picked up my renewed passport from the town hall.",
                "One less thing to worry about before the summer trip.",
            ),
            (
                "2026-02-14",
                "I really need to renew my passport at some point, it expires in August.",
                "Do it early, the queues get long before the summer.",
            ),
        ],
        distractors: &[1],
        assistant: false,
    },
    Plant {
        id: "syn-cottage-few-days",
        kind: "temporal",
        question: "A few days ago I mentioned a holiday booking. Where is it?",
        turns: &[
            (
                "2026-06-27",
                "We booked a cottage in Cornwall for the second week of August.",
                "Cornwall in August sounds perfect. Bring a rain jacket anyway.",
            ),
            (
                "2026-01-29",
                "We keep saying we should go to Cornwall someday, maybe next year.",
                "It's a beautiful part of the country, worth the trip.",
            ),
        ],
        distractors: &[1],
        assistant: false,
    },
    Plant {
        id: "syn-resolution-january",
        kind: "temporal",
        question: "What goal did I set for myself in January?",
        turns: &[
            (
                "2026-01-05",
                "My resolution for this year is to run a half marathon in October.",
                "An ambitious and achievable goal. Start with three runs a week.",
            ),
            (
                "2026-05-30",
                "Maybe I should set myself a goal of reading twenty books this year.",
                "Twenty books is a nice round target.",
            ),
        ],
        distractors: &[1],
        assistant: false,
    },
    Plant {
        id: "syn-glasses-when",
        kind: "temporal",
        question: "When did I get my new glasses?",
        turns: &[(
            "2026-04-08",
            "Picked up my new glasses today, tortoiseshell frames, everything looks so sharp.",
            "Tortoiseshell suits most faces. Enjoy the sharp view!",
        )],
        distractors: &[],
        assistant: false,
    },
    // --- multi: two turns of different sessions
    Plant {
        id: "syn-nephew-gift",
        kind: "multi",
        question: "What did I order for my nephew's birthday?",
        turns: &[
            (
                "2026-02-18",
                "My nephew Luca turns ten in June, I can't believe how fast he grows.",
                "Ten is a big birthday. Does he have any hobbies?",
            ),
            (
                "2026-06-03",
                "I ordered a small telescope for Luca, he has been obsessed with the planets.",
                "What a thoughtful present, he'll love looking at Jupiter's moons.",
            ),
        ],
        distractors: &[],
        assistant: false,
    },
    Plant {
        id: "syn-boss-approved",
        kind: "multi",
        question: "What did my boss approve?",
        turns: &[
            (
                "2026-01-25",
                "My manager Henrik is strict but fair, I like working for him.",
                "A fair manager makes all the difference.",
            ),
            (
                "2026-04-28",
                "Henrik said yes: I can work remotely from Lisbon for the whole of September.",
                "A month in Lisbon, how exciting! Congratulations.",
            ),
        ],
        distractors: &[],
        assistant: false,
    },
    Plant {
        id: "syn-apple-trees",
        kind: "multi",
        question: "What happened to the fruit trees we planted?",
        turns: &[
            (
                "2026-03-15",
                "We planted three young apple trees along the back fence this weekend.",
                "Apple trees along the fence will look lovely in a few years.",
            ),
            (
                "2026-06-15",
                "Two of the new trees caught blight, the nursery will replace them in autumn.",
                "What a pity. Good that the nursery stands behind its plants.",
            ),
        ],
        distractors: &[],
        assistant: false,
    },
    // --- inference: the answer follows from what was said
    Plant {
        id: "syn-crowded-beach",
        kind: "inference",
        question: "Would I enjoy a holiday at a packed seaside resort?",
        turns: &[(
            "2026-03-23",
            "I can't stand crowded beaches, give me a quiet mountain trail any day.",
            "Mountains it is. Fewer people and better views.",
        )],
        distractors: &[],
        assistant: false,
    },
    Plant {
        id: "syn-vegetarian",
        kind: "inference",
        question: "Should you suggest a steakhouse for my birthday dinner?",
        turns: &[(
            "2026-04-16",
            "I've been vegetarian for six years now and I don't miss meat at all.",
            "Six years, impressive! There are great vegetarian restaurants around.",
        )],
        distractors: &[],
        assistant: false,
    },
    Plant {
        id: "syn-early-riser",
        kind: "inference",
        question: "Am I a morning person?",
        turns: &[(
            "2026-05-26",
            "I'm useless before ten, mornings are brutal for me.",
            "Then schedule the hard work for the afternoon.",
        )],
        distractors: &[],
        assistant: false,
    },
];

/// Small-talk exchanges: `{}` is filled from the slot list beside it.
const FILLER: &[(&str, &str, &[&str])] = &[
    (
        "Work was busy today, three meetings about the {} rollout.",
        "That sounds draining. Did the meetings get anywhere?",
        &["billing", "onboarding", "search", "reporting"],
    ),
    (
        "It rained all day so I stayed in and watched {}.",
        "A cosy day in. How are you finding it?",
        &[
            "a nature documentary",
            "an old western",
            "a cooking show",
            "a detective series",
        ],
    ),
    (
        "I made {} for dinner tonight.",
        "Sounds tasty! Did it turn out the way you hoped?",
        &[
            "a mushroom risotto",
            "lentil soup",
            "a vegetable curry",
            "pasta with pesto",
        ],
    ),
    (
        "My sister called this evening to chat about her {}.",
        "It's nice that you two keep in touch.",
        &["garden", "kids", "new car", "job"],
    ),
    (
        "Went for a {} run along the river this morning.",
        "Great effort! How did your legs feel?",
        &["five kilometre", "short", "slow", "ten kilometre"],
    ),
    (
        "The neighbours' cat sat on our windowsill again.",
        "Cats have a way of choosing their favourite spots.",
        &[],
    ),
    (
        "I need to remember to pay the {} bill this week.",
        "Want me to remind you later in the week?",
        &["electricity", "water", "phone", "internet"],
    ),
    (
        "Everyone at lunch was talking about holidays somewhere warm.",
        "Summer plans always come up this time of year.",
        &[],
    ),
    (
        "My back is stiff from sitting at the desk too long.",
        "Try standing up every hour and stretching for a minute.",
        &[],
    ),
    (
        "Read a few chapters of {} before bed.",
        "Is it keeping your attention?",
        &[
            "a thriller",
            "a history book",
            "a short story collection",
            "a biography",
        ],
    ),
    (
        "Groceries are getting expensive, I spent {} euros this week.",
        "Prices really have gone up. A shopping list helps a little.",
        &["ninety", "eighty", "a hundred", "seventy"],
    ),
    (
        "The neighbours are renovating their kitchen, drilling all morning.",
        "Noise-cancelling headphones might be worth it.",
        &[],
    ),
    (
        "Had coffee with {} and caught up on everything.",
        "Good coffee and good company, a fine combination.",
        &["Marta", "an old friend", "my cousin", "a neighbour"],
    ),
    (
        "The train was late again, {} minutes this time.",
        "That's frustrating. Did you at least get a seat?",
        &["twenty", "forty", "fifteen", "thirty"],
    ),
    (
        "Spent the afternoon cleaning the flat and doing laundry.",
        "A clean flat makes the week start better.",
        &[],
    ),
    (
        "Watched a documentary about {} last night.",
        "Did you learn anything surprising?",
        &[
            "octopuses",
            "the moon landing",
            "deep sea fish",
            "old castles",
        ],
    ),
    (
        "Bought new running shoes, the old ones had holes.",
        "Fresh shoes make running so much nicer.",
        &[],
    ),
    (
        "Tried the new bakery on the corner, their {} is great.",
        "A good bakery nearby is dangerous for the waistline.",
        &["rye bread", "cinnamon roll", "croissant", "apple cake"],
    ),
    (
        "My sister says the weather where she lives is {}.",
        "Weather small talk with family, a tradition.",
        &["awful", "lovely", "cold", "windy"],
    ),
    (
        "I had a dentist appointment, just a routine cleaning.",
        "Routine is good news at the dentist.",
        &[],
    ),
    (
        "We talked about getting a dog someday, but not yet.",
        "A dog is a big commitment, good to think it through.",
        &[],
    ),
    (
        "The garden needs weeding again after all this rain.",
        "Weeds love the rain as much as the flowers do.",
        &[],
    ),
    (
        "Our team finished the quarterly report a day early.",
        "Nice work, early deadlines are rare.",
        &[],
    ),
    (
        "I fixed the wobbly kitchen chair with some wood glue.",
        "Small repairs are satisfying.",
        &[],
    ),
];

/// Filler exchanges per session.
const FILLER_PER_SESSION: usize = 3;

/// splitmix64: a small deterministic generator (no dependency, same numbers everywhere).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn date(s: &str) -> NaiveDate {
    NaiveDate::parse_from_str(s, "%Y-%m-%d").expect("a valid date in the synthetic set")
}

/// The synthetic set: one person's sessions (every fourth day from 5 January
/// 2026, plus the days facts were planted on), questions asked on 1 July 2026.
pub fn generate() -> ConvDataset {
    let first = date("2026-01-05");
    let last = date("2026-06-29");
    let mut days: Vec<NaiveDate> = Vec::new();
    let mut d = first;
    while d <= last {
        days.push(d);
        d += Duration::days(4);
    }
    for p in PLANTS {
        for (day, _, _) in p.turns {
            days.push(date(day));
        }
    }
    days.sort();
    days.dedup();

    let mut rng = Rng(0x00C0_FFEE);
    let mut sessions: Vec<Session> = Vec::new();
    for day in &days {
        let mut exchanges = Vec::new();
        let mut used = Vec::new();
        for _ in 0..FILLER_PER_SESSION {
            let mut i = rng.below(FILLER.len());
            while used.contains(&i) {
                i = (i + 1) % FILLER.len();
            }
            used.push(i);
            let (user, assistant, slots) = FILLER[i];
            let user = if slots.is_empty() {
                user.to_string()
            } else {
                user.replace("{}", slots[rng.below(slots.len())])
            };
            exchanges.push(Exchange {
                user,
                assistant: assistant.to_string(),
            });
        }
        sessions.push(Session {
            date: *day,
            exchanges,
        });
    }

    // Plant the facts, each at a place in its day's session the generator picks.
    for p in PLANTS {
        for (day, user, assistant) in p.turns {
            let s = sessions
                .iter_mut()
                .find(|s| s.date == date(day))
                .expect("a session on every planted day");
            let at = rng.below(s.exchanges.len() + 1);
            s.exchanges.insert(
                at,
                Exchange {
                    user: user.to_string(),
                    assistant: assistant.to_string(),
                },
            );
        }
    }
    // Each question's evidence: where its planted turns ended up.
    let questions = PLANTS
        .iter()
        .map(|p| {
            let evidence = p
                .turns
                .iter()
                .enumerate()
                .filter(|(i, _)| !p.distractors.contains(i))
                .map(|(_, (day, user, _))| {
                    let s = sessions
                        .iter()
                        .find(|s| s.date == date(day))
                        .expect("planted day");
                    let exchange = s
                        .exchanges
                        .iter()
                        .position(|e| e.user == *user)
                        .expect("planted text");
                    vec![TurnRef {
                        date: s.date,
                        exchange,
                        assistant: p.assistant,
                    }]
                })
                .collect();
            ConvQuestion {
                id: p.id.to_string(),
                conversation: "synthetic".into(),
                text: p.question.to_string(),
                kind: p.kind.to_string(),
                evidence,
            }
        })
        .collect();

    ConvDataset {
        name: "synthetic".into(),
        conversations: vec![Conversation {
            id: "synthetic".into(),
            sessions,
            asked_at: session_start(date("2026-07-01")),
        }],
        questions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_consistent_and_spread_over_months() {
        let a = generate();
        assert_eq!(a, generate(), "the same set every time");
        a.check().unwrap();
        let c = &a.conversations[0];
        assert!(c.sessions.len() >= 45, "{}", c.sessions.len());
        assert_eq!(a.questions.len(), PLANTS.len());
        for k in ["fact", "temporal", "multi", "inference"] {
            assert!(a.questions.iter().any(|q| q.kind == k), "{k}");
        }
        // Every evidence turn holds its planted text.
        for (q, p) in a.questions.iter().zip(PLANTS) {
            let planted: Vec<&str> = p
                .turns
                .iter()
                .enumerate()
                .filter(|(i, _)| !p.distractors.contains(i))
                .map(|(_, (_, u, a))| if p.assistant { *a } else { *u })
                .collect();
            for (piece, text) in q.evidence.iter().zip(planted) {
                let t = piece[0];
                let s = c.sessions.iter().find(|s| s.date == t.date).unwrap();
                let ex = &s.exchanges[t.exchange];
                let said = if t.assistant { &ex.assistant } else { &ex.user };
                assert_eq!(said, text, "{}", q.id);
            }
        }
        let months: std::collections::BTreeSet<u32> = c
            .sessions
            .iter()
            .map(|s| chrono::Datelike::month(&s.date))
            .collect();
        assert_eq!(months.len(), 6);
    }
}
