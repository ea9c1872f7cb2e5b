(** * Non-vacuity witnesses: the hypotheses of each registered theorem can all hold.

    A theorem whose hypotheses contradict each other proves nothing.  For every
    registered theorem with hypotheses, [W_<theorem>] exhibits a concrete group (mostly
    [G = 3], advantages [(1, 1, -2)], never the degenerate empty group) on which all of
    them hold at once.  The registry links each theorem to its witness, and
    [exchange proofs] checks and pins the witness like the theorem. *)

From Coq Require Import QArith Lqa Qfield Lia Qminmax.
From Exchange Require Import Sums Cancellation LengthNorm Clipping Restoration.
Open Scope Q_scope.

(** The running example: a zero-sum, non-zero advantage vector on three responses. *)
Definition A3 (i : nat) : Q := match i with O => 1 | S O => 1 | _ => -2 end.

Lemma A3_zero_sum : sum 3 A3 == 0.
Proof. vm_compute. reflexivity. Qed.

Lemma W_T1_sufficiency_exchangeable : exists G (A : nat -> Q),
  (1 < G)%nat /\ sum G A == 0 /\ ~ A O == 0.
Proof. exists 3%nat, A3. split; [lia|split; [exact A3_zero_sum|discriminate]]. Qed.

Lemma W_T1_sufficiency : exists G (A w : nat -> Q) (w0 : Q),
  (1 < G)%nat /\ ~ A O == 0 /\ sum G A == 0 /\ (forall i, (i < G)%nat -> w i == w0).
Proof.
  exists 3%nat, A3, (fun _ => 1), 1.
  split; [lia|split; [discriminate|split; [exact A3_zero_sum|intros; reflexivity]]].
Qed.

(** Equal weights and the constant scale 1 satisfy both hypotheses of T2 (binary). *)
Lemma W_T2_necessity_binary : exists G (w : nat -> Q) (sigma : (nat -> Q) -> Q),
  (1 < G)%nat /\
  (forall r, binary G r -> 0 < sigma r) /\
  (forall r, binary G r -> K G (adv G (sigma r) r) w == 0).
Proof.
  exists 3%nat, (fun _ => 1), (fun _ => 1). split; [lia|split].
  - intros. reflexivity.
  - intros r _. apply (T1_sufficiency 3 _ _ 1); [apply adv_zero_sum | intros; reflexivity].
Qed.

Lemma W_T2_necessity_zero_sum : exists G (w : nat -> Q),
  (1 < G)%nat /\ (forall A, sum G A == 0 -> K G A w == 0).
Proof.
  exists 3%nat, (fun _ => 1). split; [lia|].
  intros A HZ. apply (T1_sufficiency 3 A _ 1 HZ). intros; reflexivity.
Qed.

Lemma W_M1_two_responses : exists a : Q, ~ a == 0.
Proof. exists 1. discriminate. Qed.

Lemma W_M4_nonzero_sum_breaks : exists G (A : nat -> Q) (w0 : Q),
  (1 < G)%nat /\ ~ w0 == 0 /\ ~ sum G A == 0.
Proof. exists 2%nat, (fun _ => 1), 1. split; [lia|split; vm_compute; discriminate]. Qed.

Lemma W_null_on_equal_rewards : exists G (r : nat -> Q) (r0 : Q),
  (1 < G)%nat /\ (forall i, (i < G)%nat -> r i == r0).
Proof. exists 3%nat, (fun _ => 1), 1. split; [lia|intros; reflexivity]. Qed.

Lemma W_T3_one_correct : exists G c : nat, (1 < G)%nat /\ (c < G)%nat.
Proof. exists 3%nat, O. lia. Qed.

Lemma W_T3_harmonic_mean : exists G (L : nat -> Q) (c : nat),
  (1 < G)%nat /\ (c < G)%nat /\ (forall i, (i < G)%nat -> 0 < L i) /\ ~ L O == L 1%nat.
Proof.
  exists 3%nat, (fun i => inject_Z (Z.of_nat (S i))), O.
  split; [lia|split; [lia|split]].
  - intros i _. unfold Qlt; simpl. lia.
  - vm_compute. discriminate.
Qed.

(** Clipping: [eps = 0.2], [rho = 2] above and [rho = 1/2] below the trust region. *)
Lemma W_T4_above : exists G (A : nat -> Q) (eps_low eps_high rho : Q),
  0 <= eps_low /\ 0 <= eps_high /\ 1 + eps_high < rho /\
  (exists j, (j < G)%nat /\ A j < 0) /\ sum G A == 0.
Proof.
  exists 3%nat, A3, (1#5), (1#5), 2.
  repeat split; try (vm_compute; discriminate); try reflexivity.
  exists 2%nat. split; [lia|reflexivity].
Qed.

Lemma W_T4_below : exists G (A : nat -> Q) (eps_low eps_high rho : Q),
  0 <= eps_low /\ 0 <= eps_high /\ 0 < rho /\ rho < 1 - eps_low /\
  (exists j, (j < G)%nat /\ 0 < A j) /\ sum G A == 0.
Proof.
  exists 3%nat, A3, (1#5), (1#5), (1#2).
  repeat split; try (vm_compute; discriminate); try reflexivity.
  exists O. split; [lia|reflexivity].
Qed.

Lemma W_T4_inside_cancels : exists G (A : nat -> Q) (eps_low eps_high rho : Q),
  1 - eps_low <= rho /\ rho <= 1 + eps_high /\ sum G A == 0 /\ ~ A O == 0.
Proof.
  exists 3%nat, A3, (1#5), (1#5), 1.
  repeat split; try (vm_compute; discriminate); try reflexivity.
Qed.

(** The dual clip: [eps = 0.2], [c = 3]; [rho = 2] between [1 + eps_high] and [c],
    [rho = 4] above [c]. *)
Lemma W_T4_dual_above : exists G (A : nat -> Q) (c eps_low eps_high rho : Q),
  0 <= eps_low /\ 0 <= eps_high /\ 1 + eps_high < rho /\ rho <= c /\
  (exists j, (j < G)%nat /\ A j < 0) /\ sum G A == 0.
Proof.
  exists 3%nat, A3, 3, (1#5), (1#5), 2.
  repeat split; try (vm_compute; discriminate); try reflexivity.
  exists 2%nat. split; [lia|reflexivity].
Qed.

Lemma W_T4_dual_above_c : exists G (A : nat -> Q) (c eps_low eps_high rho : Q),
  1 + eps_high <= c /\ c < rho /\ 0 <= eps_low /\ sum G A == 0 /\ ~ A O == 0.
Proof.
  exists 3%nat, A3, 3, (1#5), (1#5), 4.
  repeat split; try (vm_compute; discriminate); try reflexivity.
Qed.

Lemma W_T4_dual_agrees_up_to_c : exists c rho : Q, rho <= c /\ 1 < rho.
Proof. exists 3, 2. split; [vm_compute; discriminate | reflexivity]. Qed.

(** M6: a zero-sum group and a non-zero event term. *)
Lemma W_M6_does_not_vanish : exists G (A : nat -> Q) (phi : Q),
  (0 < G)%nat /\ ~ phi == 0 /\ sum G A == 0 /\ ~ A O == 0.
Proof.
  exists 3%nat, A3, 1. split; [lia|split; [discriminate|split; [exact A3_zero_sum|discriminate]]].
Qed.

(** T5: the same zero-sum group serves Min-Replace, the constant normaliser, the
    sign-free and truncated weights; Adv-Orthogonal needs one non-zero advantage. *)
Lemma W_T5_zero_sum : exists G (A : nat -> Q),
  (1 < G)%nat /\ sum G A == 0 /\ ~ A O == 0.
Proof. exact W_T1_sufficiency_exchangeable. Qed.

Lemma W_T5_adv_orthogonal : exists G (A : nat -> Q),
  (exists j, (j < G)%nat /\ ~ A j == 0).
Proof. exists 3%nat, A3, O. split; [lia|discriminate]. Qed.

Open Scope Q_scope.

(** Min-Replace's general theorem needs a non-empty group; unequal weights show the
    transformation has something to do. *)
Lemma W_T5_min_replace_general : exists G (w : nat -> Q),
  (0 < G)%nat /\ ~ w O == w 1%nat /\ (1 < G)%nat.
Proof. exists 3%nat, cor33_w. split; [lia|split; [vm_compute; discriminate|lia]]. Qed.

(** ** Iff theorems: an input where each side is false

    An iff whose sides were both [True] (or both [False]) would prove nothing; these
    exhibit, for each iff theorem over Q, arguments meeting its hypotheses at which
    both sides are false (the left side through the theorem). *)
Open Scope Q_scope.

Definition L12 (i : nat) : Q := match i with O => 1 | _ => 2 end.

Lemma F_T2_characterisation :
  ~ (forall A, sum 2 A == 0 -> K 2 A (pair 1 2) == 0) /\
  ~ (forall i j, (i < 2)%nat -> (j < 2)%nat -> pair 1 2 i == pair 1 2 j).
Proof.
  assert (HR : ~ (forall i j, (i < 2)%nat -> (j < 2)%nat -> pair 1 2 i == pair 1 2 j)).
  { intro H. specialize (H 0%nat 1%nat ltac:(lia) ltac:(lia)). vm_compute in H. discriminate. }
  split; [|exact HR].
  intro H. apply HR. apply (proj1 (T2_characterisation 2 (pair 1 2))), H.
Qed.

Lemma F_T3_sign :
  ~ (0 < K 2 (adv 2 1 (ind 1)) (fun i => / L12 i)) /\
  ~ (mean 2 (fun i => / L12 i) < / L12 1%nat).
Proof.
  assert (HR : ~ (mean 2 (fun i => / L12 i) < / L12 1%nat)) by (vm_compute; discriminate).
  split; [|exact HR].
  intro H. apply HR. apply (proj1 (T3_sign 2 L12 1 ltac:(lia))), H.
Qed.

Lemma F_T3_harmonic_mean :
  ~ (0 < K 2 (adv 2 1 (ind 1)) (fun i => / L12 i)) /\
  ~ (L12 1%nat < / mean 2 (fun i => / L12 i)).
Proof.
  assert (HL : forall i, (i < 2)%nat -> 0 < L12 i).
  { intros [|i] _; reflexivity. }
  assert (HR : ~ (L12 1%nat < / mean 2 (fun i => / L12 i))) by (vm_compute; discriminate).
  split; [|exact HR].
  intro H. apply HR. apply (proj1 (T3_harmonic_mean 2 L12 1 ltac:(lia) HL)), H.
Qed.

Lemma F_M1_two_responses :
  ~ (K 2 (pair 1 (- 1)) (pair 1 2) == 0) /\ ~ (1 == 2).
Proof.
  assert (HR : ~ (1 == 2)) by discriminate.
  split; [|exact HR].
  intro H. apply HR. apply (proj1 (M1_two_responses 1 1 2 ltac:(discriminate))), H.
Qed.
