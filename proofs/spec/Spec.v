(** * The reviewed record of what the proofs prove (issue 33).

    This file is the one a reviewer reads: the definitions the theorems are stated in
    and, for every registered theorem and non-vacuity witness, its statement as a
    [Definition <name> : Prop].  It requires nothing from the development.

    [exchange proofs] has the kernel check every registered theorem against it,
    [Definition _ : ExchangeSpec.Spec.<name> := @Exchange.<Module>.<name>], so a
    theorem passes only when its statement is convertible to the one here: the
    definitions it unfolds to (a [std] replaced by a constant, a wider [binary]), its
    hypotheses and its conclusion are compared by the kernel, not as printed text, so
    notations and printing options cannot hide a change.  The sha256 of this file is
    [SPEC_SHA256] in [exchange/theory/registry.py]; editing this file is a re-pin,
    made with [exchange proofs --write-statements --accept] and logged in
    [proofs/CHANGES].  The [Example]s pin the definitions on known points.

    Non-vacuity is a property of this record (issue 43): a theorem with hypotheses is
    stated as [T := forall x, H_T x -> C_T x], its hypotheses one named predicate
    [H_T], and its witness as [W_T := H_T a] at concrete arguments [a] (a group of
    [G >= 2] responses; advantages of both signs, shown by an [Example] of
    [both_signs]).  The development proves [W_T], so [H_T] can hold, whatever that
    proof says; a re-pin that makes [H_T] contradictory makes [W_T] unprovable.
    [exchange proofs] checks this shape ([exchange/theory/nonvacuity.py]). *)

From Coq Require Import QArith Qminmax Bool.
From Coq Require Import Reals Lra.

(** ** Definitions over Q (the axiom-free development) *)
Open Scope Q_scope.

(** [sum n f = f 0 + ... + f (n-1)]; a group is a function [nat -> Q] read on [i < G]. *)
Fixpoint sum (n : nat) (f : nat -> Q) : Q :=
  match n with
  | O => 0
  | S k => sum k f + f k
  end.
Definition QG (n : nat) : Q := inject_Z (Z.of_nat n).
Definition mean (n : nat) (f : nat -> Q) : Q := sum n f / QG n.
Definition ind (j i : nat) : Q := if Nat.eqb i j then 1 else 0.

(** The event coefficient [K = sum_i A_i w_i]; group-mean advantages divided by a group
    constant [s]; binary rewards; the Cor 3.3 example; a two-response group. *)
Definition K (G : nat) (A w : nat -> Q) : Q := sum G (fun i => A i * w i).
Definition adv (G : nat) (s : Q) (r : nat -> Q) (i : nat) : Q := (r i - mean G r) / s.
Definition binary (G : nat) (r : nat -> Q) : Prop :=
  forall i, (i < G)%nat -> r i == 0 \/ r i == 1.
Definition cor33_A (i : nat) : Q := match i with O => 1 | S O => 1 | _ => -2 end.
Definition cor33_w (i : nat) : Q := match i with O => 1 | S O => 3 | _ => 2 end.
Definition pair (x y : Q) (i : nat) : Q := match i with O => x | _ => y end.
(** A group whose advantages take both signs: what every witness instance of a theorem
    about an advantage vector [A] must be ([exchange proofs] checks that the record
    proves it as an [Example] for the witness's own [G] and [A]). *)
Definition both_signs (G : nat) (A : nat -> Q) : Prop :=
  (exists i, (i < G)%nat /\ 0 < A i) /\ (exists j, (j < G)%nat /\ A j < 0).

(** PPO-clip: the clip test depends on the sign of the advantage [a]; the coefficient
    is [a * rho] unless clipped. *)
Definition qltb (x y : Q) : bool := negb (Qle_bool y x).
Definition clipped (eps_low eps_high rho a : Q) : bool :=
  (qltb 0 a && qltb (1 + eps_high) rho) || (qltb a 0 && qltb rho (1 - eps_low)).
Definition clip_coef (eps_low eps_high rho a : Q) : Q :=
  if clipped eps_low eps_high rho a then 0 else a * rho.
Definition neg_part (a : Q) : Q := if qltb a 0 then a else 0.
Definition pos_part (a : Q) : Q := if qltb 0 a then a else 0.

(** Min-Replace (group minimum) and Adv-Orthogonal ([w - (A.w / A.A) A]). *)
Fixpoint gmin (G : nat) (w : nat -> Q) : Q :=
  match G with
  | O => 0
  | S O => w O
  | S k => Qmin (gmin k w) (w k)
  end.
Definition orth (G : nat) (A w : nat -> Q) (i : nat) : Q :=
  w i - (K G A w / K G A A) * A i.
Definition min_replace (G : nat) (w : nat -> Q) (i : nat) : Q := gmin G w.

(** *** Unit tests of the Q definitions *)
Example sum_3 : sum 3 (fun i => inject_Z (Z.of_nat i)) == 3.
Proof. reflexivity. Qed.
Example mean_onehot_3 : mean 3 (ind 0) == 1 # 3.
Proof. reflexivity. Qed.
Example adv_onehot_3 : adv 3 1 (ind 0) 0 == 2 # 3 /\ adv 3 1 (ind 0) 1 == - (1 # 3).
Proof. split; reflexivity. Qed.
Example K_cor33 : K 3 cor33_A cor33_w == 0 /\ K 3 cor33_A cor33_A == 6.
Proof. split; reflexivity. Qed.
Example binary_onehot : binary 3 (ind 1) /\ ~ binary 3 (fun _ => 1 # 2).
Proof.
  split.
  - intros i _. unfold ind. destruct (Nat.eqb i 1); [right|left]; reflexivity.
  - intro H. destruct (H 0%nat ltac:(auto)) as [E|E]; discriminate E.
Qed.
(** Clip boundaries: [1 + eps_high] and [1 - eps_low] themselves are inside. *)
Example clip_points :
  (clip_coef (1 # 5) (3 # 10) 2 1 == 0) /\ (clip_coef (1 # 5) (3 # 10) 2 (-1) == -2) /\
  (clip_coef (1 # 5) (3 # 10) (13 # 10) 1 == 13 # 10) /\
  (clip_coef (1 # 5) (3 # 10) (1 # 2) (-1) == 0) /\ (clip_coef (1 # 5) (3 # 10) (1 # 2) 1 == 1 # 2) /\
  (clip_coef (1 # 5) (3 # 10) (4 # 5) (-1) == - (4 # 5)) /\ (clip_coef (1 # 5) (3 # 10) 2 0 == 0).
Proof. repeat split; reflexivity. Qed.
Example min_replace_cor33 : min_replace 3 cor33_w 2 == 1 /\ gmin 3 (fun i => cor33_w (2 - i)) == 1.
Proof. split; reflexivity. Qed.
Example orth_cor33 : orth 3 cor33_A (fun i => inject_Z (Z.of_nat i)) 0 == 1 # 2.
Proof. reflexivity. Qed.

(** ** Statements over Q *)

Definition T1_event_coefficient : Prop := forall G (A : nat -> Q) (c h m : Q),
  sum G (fun i => m * (c * A i * h)) == c * h * m * sum G A.

Definition H_T1_sufficiency_exchangeable (G : nat) (A : nat -> Q) (c h m : Q) : Prop :=
  sum G A == 0.
Definition C_T1_sufficiency_exchangeable (G : nat) (A : nat -> Q) (c h m : Q) : Prop :=
  sum G (fun i => m * (c * A i * h)) == 0.
Definition T1_sufficiency_exchangeable : Prop := forall G (A : nat -> Q) (c h m : Q),
  H_T1_sufficiency_exchangeable G A c h m -> C_T1_sufficiency_exchangeable G A c h m.

Definition H_T1_sufficiency (G : nat) (A w : nat -> Q) (w0 : Q) : Prop :=
  sum G A == 0 /\
  (forall i, (i < G)%nat -> w i == w0).
Definition C_T1_sufficiency (G : nat) (A w : nat -> Q) (w0 : Q) : Prop :=
  K G A w == 0.
Definition T1_sufficiency : Prop := forall G (A w : nat -> Q) (w0 : Q),
  H_T1_sufficiency G A w w0 -> C_T1_sufficiency G A w w0.

Definition H_T2_necessity_binary (G : nat) (w : nat -> Q) (sigma : (nat -> Q) -> Q) : Prop :=
  (forall r, binary G r -> 0 < sigma r) /\
  (forall r, binary G r -> K G (adv G (sigma r) r) w == 0).
Definition C_T2_necessity_binary (G : nat) (w : nat -> Q) (sigma : (nat -> Q) -> Q) : Prop :=
  forall i j, (i < G)%nat -> (j < G)%nat -> w i == w j.
Definition T2_necessity_binary : Prop := forall (G : nat) (w : nat -> Q) (sigma : (nat -> Q) -> Q),
  H_T2_necessity_binary G w sigma -> C_T2_necessity_binary G w sigma.

Definition H_T2_necessity_zero_sum (G : nat) (w : nat -> Q) : Prop :=
  (forall A, sum G A == 0 -> K G A w == 0).
Definition C_T2_necessity_zero_sum (G : nat) (w : nat -> Q) : Prop :=
  forall i j, (i < G)%nat -> (j < G)%nat -> w i == w j.
Definition T2_necessity_zero_sum : Prop := forall (G : nat) (w : nat -> Q),
  H_T2_necessity_zero_sum G w -> C_T2_necessity_zero_sum G w.

Definition T2_characterisation : Prop := forall (G : nat) (w : nat -> Q),
  (forall A, sum G A == 0 -> K G A w == 0) <->
  (forall i j, (i < G)%nat -> (j < G)%nat -> w i == w j).

Definition Cor33_cancellation_unequal_weights : Prop :=
  sum 3 cor33_A == 0 /\ K 3 cor33_A cor33_w == 0 /\ ~ cor33_w 0%nat == cor33_w 1%nat.

Definition H_M1_two_responses (a s1 s2 : Q) : Prop :=
  ~ a == 0.
Definition C_M1_two_responses (a s1 s2 : Q) : Prop :=
  (K 2 (pair a (- a)) (pair s1 s2) == 0 <-> s1 == s2).
Definition M1_two_responses : Prop := forall a s1 s2 : Q,
  H_M1_two_responses a s1 s2 -> C_M1_two_responses a s1 s2.

Definition H_M4_nonzero_sum_breaks (G : nat) (A : nat -> Q) (w0 : Q) : Prop :=
  ~ w0 == 0 /\
  ~ sum G A == 0.
Definition C_M4_nonzero_sum_breaks (G : nat) (A : nat -> Q) (w0 : Q) : Prop :=
  ~ K G A (fun _ => w0) == 0.
Definition M4_nonzero_sum_breaks : Prop := forall G (A : nat -> Q) (w0 : Q),
  H_M4_nonzero_sum_breaks G A w0 -> C_M4_nonzero_sum_breaks G A w0.

Definition H_null_on_equal_rewards (G : nat) (s : Q) (r w : nat -> Q) (r0 : Q) : Prop :=
  (forall i, (i < G)%nat -> r i == r0).
Definition C_null_on_equal_rewards (G : nat) (s : Q) (r w : nat -> Q) (r0 : Q) : Prop :=
  forall i, (i < G)%nat -> adv G s r i * w i == 0.
Definition null_on_equal_rewards : Prop := forall G s (r w : nat -> Q) (r0 : Q),
  H_null_on_equal_rewards G s r w r0 -> C_null_on_equal_rewards G s r w r0.

Definition T3_covariance : Prop := forall G (r x : nat -> Q),
  K G (adv G 1 r) x == sum G (fun i => (r i - mean G r) * (x i - mean G x)).

Definition H_T3_one_correct (G : nat) (L : nat -> Q) (c : nat) : Prop :=
  (c < G)%nat.
Definition C_T3_one_correct (G : nat) (L : nat -> Q) (c : nat) : Prop :=
  K G (adv G 1 (ind c)) (fun i => / L i) == / L c - mean G (fun i => / L i).
Definition T3_one_correct : Prop := forall G (L : nat -> Q) (c : nat),
  H_T3_one_correct G L c -> C_T3_one_correct G L c.

Definition H_T3_sign (G : nat) (L : nat -> Q) (c : nat) : Prop :=
  (c < G)%nat.
Definition C_T3_sign (G : nat) (L : nat -> Q) (c : nat) : Prop :=
  (0 < K G (adv G 1 (ind c)) (fun i => / L i) <-> mean G (fun i => / L i) < / L c).
Definition T3_sign : Prop := forall G (L : nat -> Q) (c : nat),
  H_T3_sign G L c -> C_T3_sign G L c.

Definition H_T3_harmonic_mean (G : nat) (L : nat -> Q) (c : nat) : Prop :=
  (c < G)%nat /\
  (forall i, (i < G)%nat -> 0 < L i).
Definition C_T3_harmonic_mean (G : nat) (L : nat -> Q) (c : nat) : Prop :=
  (0 < K G (adv G 1 (ind c)) (fun i => / L i) <-> L c < / mean G (fun i => / L i)).
Definition T3_harmonic_mean : Prop := forall G (L : nat -> Q) (c : nat),
  H_T3_harmonic_mean G L c -> C_T3_harmonic_mean G L c.

Definition H_T4_above_event_coefficient (G : nat) (A : nat -> Q) (eps_low eps_high rho : Q) : Prop :=
  0 <= eps_low /\
  0 <= eps_high /\
  1 + eps_high < rho.
Definition C_T4_above_event_coefficient (G : nat) (A : nat -> Q) (eps_low eps_high rho : Q) : Prop :=
  sum G (fun i => clip_coef eps_low eps_high rho (A i)) == rho * sum G (fun i => neg_part (A i)).
Definition T4_above_event_coefficient : Prop := forall G (A : nat -> Q) (eps_low eps_high rho : Q),
  H_T4_above_event_coefficient G A eps_low eps_high rho -> C_T4_above_event_coefficient G A eps_low eps_high rho.

Definition H_T4_above_negative (G : nat) (A : nat -> Q) (eps_low eps_high rho : Q) : Prop :=
  0 <= eps_low /\
  0 <= eps_high /\
  1 + eps_high < rho /\
  (exists j, (j < G)%nat /\ A j < 0).
Definition C_T4_above_negative (G : nat) (A : nat -> Q) (eps_low eps_high rho : Q) : Prop :=
  sum G (fun i => clip_coef eps_low eps_high rho (A i)) < 0.
Definition T4_above_negative : Prop := forall G (A : nat -> Q) (eps_low eps_high rho : Q),
  H_T4_above_negative G A eps_low eps_high rho -> C_T4_above_negative G A eps_low eps_high rho.

Definition H_T4_below_event_coefficient (G : nat) (A : nat -> Q) (eps_low eps_high rho : Q) : Prop :=
  0 <= eps_low /\
  0 <= eps_high /\
  rho < 1 - eps_low.
Definition C_T4_below_event_coefficient (G : nat) (A : nat -> Q) (eps_low eps_high rho : Q) : Prop :=
  sum G (fun i => clip_coef eps_low eps_high rho (A i)) == rho * sum G (fun i => pos_part (A i)).
Definition T4_below_event_coefficient : Prop := forall G (A : nat -> Q) (eps_low eps_high rho : Q),
  H_T4_below_event_coefficient G A eps_low eps_high rho -> C_T4_below_event_coefficient G A eps_low eps_high rho.

Definition H_T4_below_positive (G : nat) (A : nat -> Q) (eps_low eps_high rho : Q) : Prop :=
  0 <= eps_low /\
  0 <= eps_high /\
  0 < rho /\
  rho < 1 - eps_low /\
  (exists j, (j < G)%nat /\ 0 < A j).
Definition C_T4_below_positive (G : nat) (A : nat -> Q) (eps_low eps_high rho : Q) : Prop :=
  0 < sum G (fun i => clip_coef eps_low eps_high rho (A i)).
Definition T4_below_positive : Prop := forall G (A : nat -> Q) (eps_low eps_high rho : Q),
  H_T4_below_positive G A eps_low eps_high rho -> C_T4_below_positive G A eps_low eps_high rho.

Definition H_T4_inside_cancels (G : nat) (A : nat -> Q) (eps_low eps_high rho : Q) : Prop :=
  1 - eps_low <= rho /\
  rho <= 1 + eps_high /\
  sum G A == 0.
Definition C_T4_inside_cancels (G : nat) (A : nat -> Q) (eps_low eps_high rho : Q) : Prop :=
  sum G (fun i => clip_coef eps_low eps_high rho (A i)) == 0.
Definition T4_inside_cancels : Prop := forall G (A : nat -> Q) (eps_low eps_high rho : Q),
  H_T4_inside_cancels G A eps_low eps_high rho -> C_T4_inside_cancels G A eps_low eps_high rho.

Definition H_T5_min_replace (G : nat) (A w : nat -> Q) : Prop :=
  sum G A == 0.
Definition C_T5_min_replace (G : nat) (A w : nat -> Q) : Prop :=
  K G A (fun _ => gmin G w) == 0.
Definition T5_min_replace : Prop := forall G (A w : nat -> Q),
  H_T5_min_replace G A w -> C_T5_min_replace G A w.

Definition H_T5_constant_normaliser (G : nat) (A : nat -> Q) (C : Q) : Prop :=
  sum G A == 0.
Definition C_T5_constant_normaliser (G : nat) (A : nat -> Q) (C : Q) : Prop :=
  K G A (fun _ => / C) == 0.
Definition T5_constant_normaliser : Prop := forall G (A : nat -> Q) (C : Q),
  H_T5_constant_normaliser G A C -> C_T5_constant_normaliser G A C.

Definition H_T5_adv_orthogonal (G : nat) (A w : nat -> Q) : Prop :=
  (exists j, (j < G)%nat /\ ~ A j == 0).
Definition C_T5_adv_orthogonal (G : nat) (A w : nat -> Q) : Prop :=
  K G A (orth G A w) == 0.
Definition T5_adv_orthogonal : Prop := forall G (A w : nat -> Q),
  H_T5_adv_orthogonal G A w -> C_T5_adv_orthogonal G A w.

Definition H_T5_sign_free_weight (G : nat) (A : nat -> Q) (h : Q -> Q) (rho : Q) : Prop :=
  sum G A == 0.
Definition C_T5_sign_free_weight (G : nat) (A : nat -> Q) (h : Q -> Q) (rho : Q) : Prop :=
  K G A (fun _ => h rho) == 0.
Definition T5_sign_free_weight : Prop := forall G (A : nat -> Q) (h : Q -> Q) (rho : Q),
  H_T5_sign_free_weight G A h rho -> C_T5_sign_free_weight G A h rho.

Definition H_T5_truncated_ratio (G : nat) (A : nat -> Q) (rho eps : Q) : Prop :=
  sum G A == 0.
Definition C_T5_truncated_ratio (G : nat) (A : nat -> Q) (rho eps : Q) : Prop :=
  K G A (fun _ => Qmin rho (1 + eps)) == 0.
Definition T5_truncated_ratio : Prop := forall G (A : nat -> Q) (rho eps : Q),
  H_T5_truncated_ratio G A rho eps -> C_T5_truncated_ratio G A rho eps.

Definition H_T5_min_replace_general (G : nat) (w : nat -> Q) : Prop :=
  (0 < G)%nat.
Definition C_T5_min_replace_general (G : nat) (w : nat -> Q) : Prop :=
  (forall i j, (i < G)%nat -> (j < G)%nat -> min_replace G w i == min_replace G w j) /\ (forall i j, (i < G)%nat -> (j < G)%nat -> min_replace G w i <= w j) /\ (exists k, (k < G)%nat /\ forall i, min_replace G w i == w k) /\ (forall A, sum G A == 0 -> K G A (min_replace G w) == 0).
Definition T5_min_replace_general : Prop := forall G (w : nat -> Q),
  H_T5_min_replace_general G w -> C_T5_min_replace_general G w.

Definition H_T5_adv_orthogonal_projection (G : nat) (A w : nat -> Q) : Prop :=
  (exists j, (j < G)%nat /\ ~ A j == 0).
Definition C_T5_adv_orthogonal_projection (G : nat) (A w : nat -> Q) : Prop :=
  K G A (orth G A w) == 0 /\ exists t, forall i, w i - orth G A w i == t * A i.
Definition T5_adv_orthogonal_projection : Prop := forall G (A w : nat -> Q),
  H_T5_adv_orthogonal_projection G A w -> C_T5_adv_orthogonal_projection G A w.

Definition H_T5_event_clip (G : nat) (A : nat -> Q) (clip : Q -> bool) (h : Q -> Q) (rho : Q) : Prop :=
  sum G A == 0.
Definition C_T5_event_clip (G : nat) (A : nat -> Q) (clip : Q -> bool) (h : Q -> Q) (rho : Q) : Prop :=
  sum G (fun i => if clip rho then 0 else A i * h rho) == 0.
Definition T5_event_clip : Prop := forall G (A : nat -> Q) (clip : Q -> bool) (h : Q -> Q) (rho : Q),
  H_T5_event_clip G A clip h rho -> C_T5_event_clip G A clip h rho.

(** ** The dual clip of the package's [ppo], M6, and Adv-Orthogonal's weights *)

(** For a negative advantage the surrogate is floored at [c * A]: above [rho > c] the
    coefficient is zero too. *)
Definition dual_clip_coef (c eps_low eps_high rho a : Q) : Q :=
  if qltb a 0 && qltb c rho then 0 else clip_coef eps_low eps_high rho a.

Example dual_clip_points :
  (dual_clip_coef 3 (1 # 5) (1 # 5) 4 (-1) == 0) /\ (dual_clip_coef 3 (1 # 5) (1 # 5) 3 (-1) == -3) /\
  (dual_clip_coef 3 (1 # 5) (1 # 5) 2 (-1) == -2) /\ (dual_clip_coef 3 (1 # 5) (1 # 5) 4 1 == 0).
Proof. repeat split; reflexivity. Qed.

Definition H_T4_dual_agrees_up_to_c (c eps_low eps_high rho a : Q) : Prop :=
  rho <= c.
Definition C_T4_dual_agrees_up_to_c (c eps_low eps_high rho a : Q) : Prop :=
  dual_clip_coef c eps_low eps_high rho a == clip_coef eps_low eps_high rho a.
Definition T4_dual_agrees_up_to_c : Prop := forall (c eps_low eps_high rho a : Q),
  H_T4_dual_agrees_up_to_c c eps_low eps_high rho a -> C_T4_dual_agrees_up_to_c c eps_low eps_high rho a.

Definition H_T4_dual_above_negative (G : nat) (A : nat -> Q) (c eps_low eps_high rho : Q) : Prop :=
  0 <= eps_low /\
  0 <= eps_high /\
  1 + eps_high < rho /\
  rho <= c /\
  (exists j, (j < G)%nat /\ A j < 0).
Definition C_T4_dual_above_negative (G : nat) (A : nat -> Q) (c eps_low eps_high rho : Q) : Prop :=
  sum G (fun i => dual_clip_coef c eps_low eps_high rho (A i)) < 0.
Definition T4_dual_above_negative : Prop := forall G (A : nat -> Q) (c eps_low eps_high rho : Q),
  H_T4_dual_above_negative G A c eps_low eps_high rho -> C_T4_dual_above_negative G A c eps_low eps_high rho.

Definition H_T4_dual_above_c (G : nat) (A : nat -> Q) (c eps_low eps_high rho : Q) : Prop :=
  1 + eps_high <= c /\
  c < rho.
Definition C_T4_dual_above_c (G : nat) (A : nat -> Q) (c eps_low eps_high rho : Q) : Prop :=
  forall i, (i < G)%nat -> dual_clip_coef c eps_low eps_high rho (A i) == 0.
Definition T4_dual_above_c : Prop := forall G (A : nat -> Q) (c eps_low eps_high rho : Q),
  H_T4_dual_above_c G A c eps_low eps_high rho -> C_T4_dual_above_c G A c eps_low eps_high rho.

Definition H_M6_additive_term (G : nat) (A : nat -> Q) (w0 phi : Q) : Prop :=
  sum G A == 0.
Definition C_M6_additive_term (G : nat) (A : nat -> Q) (w0 phi : Q) : Prop :=
  sum G (fun i => A i * w0 + phi) == QG G * phi.
Definition M6_additive_term : Prop := forall G (A : nat -> Q) (w0 phi : Q),
  H_M6_additive_term G A w0 phi -> C_M6_additive_term G A w0 phi.

Definition H_M6_does_not_vanish (G : nat) (A : nat -> Q) (w0 phi : Q) : Prop :=
  (0 < G)%nat /\
  ~ phi == 0 /\
  sum G A == 0.
Definition C_M6_does_not_vanish (G : nat) (A : nat -> Q) (w0 phi : Q) : Prop :=
  ~ sum G (fun i => A i * w0 + phi) == 0.
Definition M6_does_not_vanish : Prop := forall G (A : nat -> Q) (w0 phi : Q),
  H_M6_does_not_vanish G A w0 phi -> C_M6_does_not_vanish G A w0 phi.

Definition T5_adv_orthogonal_unequal : Prop :=
  (exists j, (j < 3)%nat /\ ~ cor33_A j == 0) /\
  K 3 cor33_A (orth 3 cor33_A cor33_w) == 0 /\
  ~ orth 3 cor33_A cor33_w 0%nat == orth 3 cor33_A cor33_w 1%nat.

(** ** Iff theorems over Q: an input where each side is false *)

Definition L12 (i : nat) : Q := match i with O => 1 | _ => 2 end.

Definition F_T2_characterisation : Prop :=
  ~ (forall A, sum 2 A == 0 -> K 2 A (pair 1 2) == 0) /\
  ~ (forall i j, (i < 2)%nat -> (j < 2)%nat -> pair 1 2 i == pair 1 2 j).

Definition F_T3_sign : Prop :=
  ~ (0 < K 2 (adv 2 1 (ind 1)) (fun i => / L12 i)) /\
  ~ (mean 2 (fun i => / L12 i) < / L12 1%nat).

Definition F_T3_harmonic_mean : Prop :=
  ~ (0 < K 2 (adv 2 1 (ind 1)) (fun i => / L12 i)) /\
  ~ (L12 1%nat < / mean 2 (fun i => / L12 i)).

Definition F_M1_two_responses : Prop :=
  ~ (K 2 (pair 1 (- 1)) (pair 1 2) == 0) /\ ~ (1 == 2).

(** ** (E) and its product form; OPO's baseline (M4) *)

(** (E) as THEORY.md section 2 defines it, for shared events of any type [E], one
    coefficient [kappa i e] per response and event. *)
Definition exchangeable {E : Type} (G : nat) (A : nat -> Q) (kappa : nat -> E -> Q) : Prop :=
  (forall e i j, (i < G)%nat -> (j < G)%nat -> ~ A i == 0 -> ~ A j == 0 ->
     kappa i e / A i == kappa j e / A j) /\
  (forall e i, (i < G)%nat -> A i == 0 -> kappa i e == 0).

(** OPO: advantages [r_i - b] with the length-weighted baseline [b = sum L r / sum L]. *)
Definition opo_adv (G : nat) (L r : nat -> Q) (i : nat) : Q :=
  r i - sum G (fun j => L j * r j) / sum G L.

Example opo_adv_points : opo_adv 2 (pair 1 2) (pair 1 0) 0 == 2 # 3 /\
  opo_adv 2 (pair 1 2) (pair 1 0) 1 == - (1 # 3).
Proof. split; reflexivity. Qed.

Definition E_product_form : Prop := forall (E : Type) (G : nat) (A : nat -> Q) (kappa : nat -> E -> Q),
  exchangeable G A kappa <->
  (exists h : E -> Q, forall e i, (i < G)%nat -> kappa i e == A i * h e).

Definition H_M4_opo_sum (G : nat) (L r : nat -> Q) : Prop :=
  ~ sum G L == 0.
Definition C_M4_opo_sum (G : nat) (L r : nat -> Q) : Prop :=
  sum G (opo_adv G L r) * sum G L == - QG G * sum G (fun i => (L i - mean G L) * (r i - mean G r)).
Definition M4_opo_sum : Prop := forall G (L r : nat -> Q),
  H_M4_opo_sum G L r -> C_M4_opo_sum G L r.

Definition H_M4_opo_equal_lengths (G : nat) (L r : nat -> Q) (l : Q) : Prop :=
  (0 < G)%nat /\
  ~ l == 0 /\
  (forall i, (i < G)%nat -> L i == l).
Definition C_M4_opo_equal_lengths (G : nat) (L r : nat -> Q) (l : Q) : Prop :=
  sum G (opo_adv G L r) == 0.
Definition M4_opo_equal_lengths : Prop := forall G (L r : nat -> Q) (l : Q),
  H_M4_opo_equal_lengths G L r l -> C_M4_opo_equal_lengths G L r l.

Definition M4_opo_not_zero_sum : Prop := ~ sum 2 (opo_adv 2 (pair 1 2) (pair 1 0)) == 0.

(** ** Non-vacuity witnesses over Q: each theorem's hypotheses [H_T] at concrete
    arguments (Cor 3.3's group [A = (1, 1, -2)], weights [(1, 3, 2)], lengths [(1, 2)],
    [eps = 0.2], [rho = 2], [1/2] or [1], the dual clip [c = 3]); the development proves
    each, so the hypotheses hold together.  The iff theorems without hypotheses keep
    their right-to-left instance, proved by applying the theorem. *)

Definition W_T1_sufficiency_exchangeable : Prop := H_T1_sufficiency_exchangeable 3 cor33_A 2 3 1.

Definition W_T1_sufficiency : Prop := H_T1_sufficiency 3 cor33_A (fun _ => 2) 2.

Definition W_T2_necessity_binary : Prop := H_T2_necessity_binary 3 (fun _ => 2) (fun _ => 1).

Definition W_T2_necessity_zero_sum : Prop := H_T2_necessity_zero_sum 3 (fun _ => 2).

Definition W_T2_characterisation : Prop := forall A, sum 2 A == 0 -> K 2 A (fun _ => 2) == 0.

Definition W_M1_two_responses : Prop := H_M1_two_responses 1 2 2.

Definition W_M4_nonzero_sum_breaks : Prop := H_M4_nonzero_sum_breaks 2 (pair 2 (- 1)) 2.

Definition W_M6_additive_term : Prop := H_M6_additive_term 3 cor33_A 2 1.

Definition W_M6_does_not_vanish : Prop := H_M6_does_not_vanish 3 cor33_A 2 1.

Definition W_null_on_equal_rewards : Prop := H_null_on_equal_rewards 3 2 (fun _ => 1) cor33_w 1.

Definition W_E_product_form : Prop := exchangeable 3 cor33_A (fun i (e : Q) => cor33_A i * e).

Definition W_M4_opo_sum : Prop := H_M4_opo_sum 2 L12 (pair 1 0).

Definition W_M4_opo_equal_lengths : Prop := H_M4_opo_equal_lengths 3 (fun _ => 2) (ind 0) 2.

Definition W_T3_one_correct : Prop := H_T3_one_correct 2 L12 1.

Definition W_T3_sign : Prop := H_T3_sign 2 L12 0.

Definition W_T3_harmonic_mean : Prop := H_T3_harmonic_mean 2 L12 0.

Definition W_T4_above_event_coefficient : Prop := H_T4_above_event_coefficient 3 cor33_A (1#5) (1#5) 2.

Definition W_T4_above_negative : Prop := H_T4_above_negative 3 cor33_A (1#5) (1#5) 2.

Definition W_T4_below_event_coefficient : Prop := H_T4_below_event_coefficient 3 cor33_A (1#5) (1#5) (1#2).

Definition W_T4_below_positive : Prop := H_T4_below_positive 3 cor33_A (1#5) (1#5) (1#2).

Definition W_T4_inside_cancels : Prop := H_T4_inside_cancels 3 cor33_A (1#5) (1#5) 1.

Definition W_T4_dual_agrees_up_to_c : Prop := H_T4_dual_agrees_up_to_c 3 (1#5) (1#5) 2 (-1).

Definition W_T4_dual_above_negative : Prop := H_T4_dual_above_negative 3 cor33_A 3 (1#5) (1#5) 2.

Definition W_T4_dual_above_c : Prop := H_T4_dual_above_c 3 cor33_A 3 (1#5) (1#5) 4.

Definition W_T5_min_replace : Prop := H_T5_min_replace 3 cor33_A cor33_w.

Definition W_T5_constant_normaliser : Prop := H_T5_constant_normaliser 3 cor33_A 7.

Definition W_T5_adv_orthogonal : Prop := H_T5_adv_orthogonal 3 cor33_A (pair 1 2).

Definition W_T5_adv_orthogonal_projection : Prop := H_T5_adv_orthogonal_projection 3 cor33_A (pair 1 2).

Definition W_T5_sign_free_weight : Prop := H_T5_sign_free_weight 3 cor33_A (fun x => x * x) 2.

Definition W_T5_truncated_ratio : Prop := H_T5_truncated_ratio 3 cor33_A 2 (1#5).

Definition W_T5_min_replace_general : Prop := H_T5_min_replace_general 3 cor33_w.

Definition W_T5_event_clip : Prop := H_T5_event_clip 3 cor33_A (qltb 1) (fun x => x) 2.

(** The advantage vectors of the witnesses above take both signs. *)
Example both_signs_cor33 : both_signs 3 cor33_A.
Proof. split; [exists 0%nat | exists 2%nat]; split; try reflexivity; repeat constructor. Qed.
Example both_signs_pair : both_signs 2 (pair 2 (- 1)).
Proof. split; [exists 0%nat | exists 1%nat]; split; try reflexivity; repeat constructor. Qed.

Definition F_E_product_form : Prop :=
  ~ exchangeable 3 cor33_A (fun i (e : Q) => cor33_w i * e) /\
  ~ (exists h : Q -> Q, forall e i, (i < 3)%nat -> cor33_w i * e == cor33_A i * h e).

(** ** Definitions over R (Coq's standard Reals) *)
Open Scope R_scope.

Fixpoint Rsum (n : nat) (f : nat -> R) : R :=
  match n with O => 0 | S k => Rsum k f + f k end.
Definition Rmean (n : nat) (f : nat -> R) : R := Rsum n f / INR n.
Definition Rind (j i : nat) : R := if Nat.eqb i j then 1 else 0.
Definition RK (G : nat) (A w : nat -> R) : R := Rsum G (fun i => A i * w i).
Definition Radv (G : nat) (s : R) (r : nat -> R) (i : nat) : R := (r i - Rmean G r) / s.
Definition Rstd (G : nat) (r : nat -> R) : R :=
  sqrt (Rmean G (fun i => (r i - Rmean G r) * (r i - Rmean G r))).
Definition R_clip_coef (eps_low eps_high rho a : R) : R :=
  if Rlt_dec 0 a then (if Rlt_dec (1 + eps_high) rho then 0 else a * rho)
  else if Rlt_dec a 0 then (if Rlt_dec rho (1 - eps_low) then 0 else a * rho)
  else a * rho.
Definition R_neg_part (a : R) : R := if Rlt_dec a 0 then a else 0.
Definition R_pos_part (a : R) : R := if Rlt_dec 0 a then a else 0.
Definition gspo_weight (L : nat) (logrho : nat -> R) : R := exp (Rsum L logrho / INR L).
Definition Rboth_signs (G : nat) (A : nat -> R) : Prop :=
  (exists i, (i < G)%nat /\ 0 < A i) /\ (exists j, (j < G)%nat /\ A j < 0).

(** *** Unit tests of the R definitions *)
Example Rstd_onehot_2 : Rstd 2 (Rind 0) = / 2.
Proof.
  unfold Rstd, Rmean, Rind. simpl.
  replace ((0 + (1 - (0 + 1 + 0) / (1 + 1)) * (1 - (0 + 1 + 0) / (1 + 1)) +
            (0 - (0 + 1 + 0) / (1 + 1)) * (0 - (0 + 1 + 0) / (1 + 1))) / (1 + 1))
    with (/ 2 * / 2) by field.
  apply sqrt_square. lra.
Qed.
Example gspo_weight_points : gspo_weight 2 (fun _ => 0) = 1 /\ gspo_weight 1 (fun _ => ln 2) = 2.
Proof.
  unfold gspo_weight. simpl. split.
  - replace ((0 + 0 + 0) / (1 + 1)) with 0 by field. apply exp_0.
  - replace ((0 + ln 2) / 1) with (ln 2) by field. apply exp_ln. lra.
Qed.
Example R_clip_points : R_clip_coef (1 / 5) (3 / 10) 2 1 = 0 /\ R_clip_coef (1 / 5) (3 / 10) 2 (-1) = -2.
Proof.
  unfold R_clip_coef. split.
  - destruct (Rlt_dec 0 1); [|lra]. destruct (Rlt_dec (1 + 3 / 10) 2); [reflexivity|lra].
  - destruct (Rlt_dec 0 (-1)); [lra|]. destruct (Rlt_dec (-1) 0); [|lra].
    destruct (Rlt_dec 2 (1 - 1 / 5)); [lra|ring].
Qed.

(** ** Statements over R *)

Definition H_R_T1_sufficiency (G : nat) (A w : nat -> R) (w0 : R) : Prop :=
  Rsum G A = 0 /\
  (forall i, (i < G)%nat -> w i = w0).
Definition C_R_T1_sufficiency (G : nat) (A w : nat -> R) (w0 : R) : Prop :=
  RK G A w = 0.
Definition R_T1_sufficiency : Prop := forall G (A w : nat -> R) (w0 : R),
  H_R_T1_sufficiency G A w w0 -> C_R_T1_sufficiency G A w w0.

Definition H_R_T2_necessity_onehot (G : nat) (w : nat -> R) (sigma : (nat -> R) -> R) : Prop :=
  (forall j, (j < G)%nat -> 0 < sigma (Rind j)) /\
  (forall j, (j < G)%nat -> RK G (Radv G (sigma (Rind j)) (Rind j)) w = 0).
Definition C_R_T2_necessity_onehot (G : nat) (w : nat -> R) (sigma : (nat -> R) -> R) : Prop :=
  forall i j, (i < G)%nat -> (j < G)%nat -> w i = w j.
Definition R_T2_necessity_onehot : Prop := forall (G : nat) (w : nat -> R) (sigma : (nat -> R) -> R),
  H_R_T2_necessity_onehot G w sigma -> C_R_T2_necessity_onehot G w sigma.

Definition H_R_T2_necessity_std (G : nat) (w : nat -> R) : Prop :=
  (2 <= G)%nat /\
  (forall j, (j < G)%nat -> RK G (Radv G (Rstd G (Rind j)) (Rind j)) w = 0).
Definition C_R_T2_necessity_std (G : nat) (w : nat -> R) : Prop :=
  forall i j, (i < G)%nat -> (j < G)%nat -> w i = w j.
Definition R_T2_necessity_std : Prop := forall (G : nat) (w : nat -> R),
  H_R_T2_necessity_std G w -> C_R_T2_necessity_std G w.

Definition H_R_null_on_equal_rewards (G : nat) (s : R) (r w : nat -> R) (r0 : R) : Prop :=
  0 < s /\
  (forall i, (i < G)%nat -> r i = r0).
Definition C_R_null_on_equal_rewards (G : nat) (s : R) (r w : nat -> R) (r0 : R) : Prop :=
  forall i, (i < G)%nat -> Radv G s r i * w i = 0.
Definition R_null_on_equal_rewards : Prop := forall G s (r w : nat -> R) (r0 : R),
  H_R_null_on_equal_rewards G s r w r0 -> C_R_null_on_equal_rewards G s r w r0.

Definition H_R_T3_one_correct (G : nat) (L : nat -> R) (c : nat) : Prop :=
  (c < G)%nat.
Definition C_R_T3_one_correct (G : nat) (L : nat -> R) (c : nat) : Prop :=
  RK G (Radv G 1 (Rind c)) (fun i => / L i) = / L c - Rmean G (fun i => / L i).
Definition R_T3_one_correct : Prop := forall G (L : nat -> R) (c : nat),
  H_R_T3_one_correct G L c -> C_R_T3_one_correct G L c.

Definition H_R_T3_harmonic_mean (G : nat) (L : nat -> R) (c : nat) : Prop :=
  (c < G)%nat /\
  (forall i, (i < G)%nat -> 0 < L i).
Definition C_R_T3_harmonic_mean (G : nat) (L : nat -> R) (c : nat) : Prop :=
  (0 < RK G (Radv G 1 (Rind c)) (fun i => / L i) <-> L c < / Rmean G (fun i => / L i)).
Definition R_T3_harmonic_mean : Prop := forall G (L : nat -> R) (c : nat),
  H_R_T3_harmonic_mean G L c -> C_R_T3_harmonic_mean G L c.

Definition H_R_T4_above_event_coefficient (G : nat) (A : nat -> R) (eps_low eps_high rho : R) : Prop :=
  0 <= eps_low /\
  0 <= eps_high /\
  1 + eps_high < rho.
Definition C_R_T4_above_event_coefficient (G : nat) (A : nat -> R) (eps_low eps_high rho : R) : Prop :=
  Rsum G (fun i => R_clip_coef eps_low eps_high rho (A i)) = rho * Rsum G (fun i => R_neg_part (A i)).
Definition R_T4_above_event_coefficient : Prop := forall G (A : nat -> R) (eps_low eps_high rho : R),
  H_R_T4_above_event_coefficient G A eps_low eps_high rho -> C_R_T4_above_event_coefficient G A eps_low eps_high rho.

Definition H_R_T4_above_negative (G : nat) (A : nat -> R) (eps_low eps_high rho : R) : Prop :=
  0 <= eps_low /\
  0 <= eps_high /\
  1 + eps_high < rho /\
  (exists j, (j < G)%nat /\ A j < 0).
Definition C_R_T4_above_negative (G : nat) (A : nat -> R) (eps_low eps_high rho : R) : Prop :=
  Rsum G (fun i => R_clip_coef eps_low eps_high rho (A i)) < 0.
Definition R_T4_above_negative : Prop := forall G (A : nat -> R) (eps_low eps_high rho : R),
  H_R_T4_above_negative G A eps_low eps_high rho -> C_R_T4_above_negative G A eps_low eps_high rho.

Definition H_R_T4_below_event_coefficient (G : nat) (A : nat -> R) (eps_low eps_high rho : R) : Prop :=
  0 <= eps_low /\
  0 <= eps_high /\
  rho < 1 - eps_low.
Definition C_R_T4_below_event_coefficient (G : nat) (A : nat -> R) (eps_low eps_high rho : R) : Prop :=
  Rsum G (fun i => R_clip_coef eps_low eps_high rho (A i)) = rho * Rsum G (fun i => R_pos_part (A i)).
Definition R_T4_below_event_coefficient : Prop := forall G (A : nat -> R) (eps_low eps_high rho : R),
  H_R_T4_below_event_coefficient G A eps_low eps_high rho -> C_R_T4_below_event_coefficient G A eps_low eps_high rho.

Definition H_R_T4_below_positive (G : nat) (A : nat -> R) (eps_low eps_high rho : R) : Prop :=
  0 <= eps_low /\
  0 <= eps_high /\
  0 < rho /\
  rho < 1 - eps_low /\
  (exists j, (j < G)%nat /\ 0 < A j).
Definition C_R_T4_below_positive (G : nat) (A : nat -> R) (eps_low eps_high rho : R) : Prop :=
  0 < Rsum G (fun i => R_clip_coef eps_low eps_high rho (A i)).
Definition R_T4_below_positive : Prop := forall G (A : nat -> R) (eps_low eps_high rho : R),
  H_R_T4_below_positive G A eps_low eps_high rho -> C_R_T4_below_positive G A eps_low eps_high rho.

Definition H_R_T4_inside_cancels (G : nat) (A : nat -> R) (eps_low eps_high rho : R) : Prop :=
  1 - eps_low <= rho /\
  rho <= 1 + eps_high /\
  Rsum G A = 0.
Definition C_R_T4_inside_cancels (G : nat) (A : nat -> R) (eps_low eps_high rho : R) : Prop :=
  Rsum G (fun i => R_clip_coef eps_low eps_high rho (A i)) = 0.
Definition R_T4_inside_cancels : Prop := forall G (A : nat -> R) (eps_low eps_high rho : R),
  H_R_T4_inside_cancels G A eps_low eps_high rho -> C_R_T4_inside_cancels G A eps_low eps_high rho.

Definition H_R_M1_gspo (G : nat) (L : nat -> nat) (logrho : nat -> nat -> R) : Prop :=
  (2 <= G)%nat.
Definition C_R_M1_gspo (G : nat) (L : nat -> nat) (logrho : nat -> nat -> R) : Prop :=
  ((forall j, (j < G)%nat -> RK G (Radv G (Rstd G (Rind j)) (Rind j)) (fun i => gspo_weight (L i) (logrho i) / INR (L i)) = 0) <-> (forall i j, (i < G)%nat -> (j < G)%nat -> gspo_weight (L i) (logrho i) / INR (L i) = gspo_weight (L j) (logrho j) / INR (L j))).
Definition R_M1_gspo : Prop := forall (G : nat) (L : nat -> nat) (logrho : nat -> nat -> R),
  H_R_M1_gspo G L logrho -> C_R_M1_gspo G L logrho.

Definition H_R_M1_gspo_equal_lengths (G L : nat) (logrho : nat -> nat -> R) : Prop :=
  (2 <= G)%nat /\
  (0 < L)%nat.
Definition C_R_M1_gspo_equal_lengths (G L : nat) (logrho : nat -> nat -> R) : Prop :=
  ((forall j, (j < G)%nat -> RK G (Radv G (Rstd G (Rind j)) (Rind j)) (fun i => gspo_weight L (logrho i) / INR L) = 0) <-> (forall i j, (i < G)%nat -> (j < G)%nat -> gspo_weight L (logrho i) = gspo_weight L (logrho j))).
Definition R_M1_gspo_equal_lengths : Prop := forall (G : nat) (L : nat) (logrho : nat -> nat -> R),
  H_R_M1_gspo_equal_lengths G L logrho -> C_R_M1_gspo_equal_lengths G L logrho.

Definition H_R_Cor33_hyperplane (G : nat) (A : nat -> R) : Prop :=
  (exists j, (j < G)%nat /\ A j <> 0).
Definition C_R_Cor33_hyperplane (G : nat) (A : nat -> R) : Prop :=
  (forall w1 w2 a b, RK G A w1 = 0 -> RK G A w2 = 0 -> RK G A (fun i => a * w1 i + b * w2 i) = 0) /\ RK G A A <> 0 /\ (forall w, exists t, RK G A (fun i => w i - t * A i) = 0).
Definition R_Cor33_hyperplane : Prop := forall G (A : nat -> R),
  H_R_Cor33_hyperplane G A -> C_R_Cor33_hyperplane G A.

(** ** T2 over real reward vectors *)

Definition H_R_T2_necessity_reals (G : nat) (w : nat -> R) (sigma : (nat -> R) -> R) : Prop :=
  (2 <= G)%nat /\
  (forall r, (exists a b, (a < G)%nat /\ (b < G)%nat /\ r a <> r b) -> 0 < sigma r) /\
  (forall r, (exists a b, (a < G)%nat /\ (b < G)%nat /\ r a <> r b) -> RK G (Radv G (sigma r) r) w = 0).
Definition C_R_T2_necessity_reals (G : nat) (w : nat -> R) (sigma : (nat -> R) -> R) : Prop :=
  forall i j, (i < G)%nat -> (j < G)%nat -> w i = w j.
Definition R_T2_necessity_reals : Prop := forall (G : nat) (w : nat -> R) (sigma : (nat -> R) -> R),
  H_R_T2_necessity_reals G w sigma -> C_R_T2_necessity_reals G w sigma.

(** ** Non-vacuity witnesses over R: each theorem's hypotheses at the group
    [RA2 = (1, -1)], lengths [RL12 = (1, 2)]. *)

Definition RA2 (i : nat) : R := match i with O => 1 | S O => -1 | _ => 0 end.
Definition RL12 (i : nat) : R := match i with O => 1 | _ => 2 end.

(** The advantage vector of the witnesses below takes both signs. *)
Example Rboth_signs_RA2 : Rboth_signs 2 RA2.
Proof. split; [exists 0%nat | exists 1%nat]; split; try (repeat constructor); simpl; lra. Qed.

Definition W_R_T1_sufficiency : Prop := H_R_T1_sufficiency 2 RA2 (fun _ => 2) 2.

Definition W_R_T2_necessity_onehot : Prop := H_R_T2_necessity_onehot 2 (fun _ => 2) (fun _ => 1).

Definition W_R_T2_necessity_reals : Prop := H_R_T2_necessity_reals 2 (fun _ => 2) (fun _ => 1).

Definition W_R_T2_necessity_std : Prop := H_R_T2_necessity_std 2 (fun _ => 2).

Definition W_R_null_on_equal_rewards : Prop := H_R_null_on_equal_rewards 2 2 (fun _ => 1) RA2 1.

Definition W_R_T3_one_correct : Prop := H_R_T3_one_correct 2 RL12 1.

Definition W_R_T3_harmonic_mean : Prop := H_R_T3_harmonic_mean 2 RL12 0.

Definition W_R_T4_above_event_coefficient : Prop := H_R_T4_above_event_coefficient 2 RA2 (1/5) (1/5) 2.

Definition W_R_T4_above_negative : Prop := H_R_T4_above_negative 2 RA2 (1/5) (1/5) 2.

Definition W_R_T4_below_event_coefficient : Prop := H_R_T4_below_event_coefficient 2 RA2 (1/5) (1/5) (1/2).

Definition W_R_T4_below_positive : Prop := H_R_T4_below_positive 2 RA2 (1/5) (1/5) (1/2).

Definition W_R_T4_inside_cancels : Prop := H_R_T4_inside_cancels 2 RA2 (1/5) (1/5) 1.

Definition W_R_M1_gspo : Prop := H_R_M1_gspo 2 (fun _ => 1%nat) (fun _ _ => 0).

Definition W_R_M1_gspo_equal_lengths : Prop := H_R_M1_gspo_equal_lengths 2 1%nat (fun _ _ => 0).

Definition W_R_Cor33_hyperplane : Prop := H_R_Cor33_hyperplane 2 RA2.

(** ** Iff theorems over R: an input where each side is false *)

Definition F_R_T3_harmonic_mean : Prop :=
  ~ (0 < RK 2 (Radv 2 1 (Rind 1)) (fun i => / RL12 i)) /\
  ~ (RL12 1%nat < / Rmean 2 (fun i => / RL12 i)).

Definition NL12 (i : nat) : nat := match i with O => 1%nat | _ => 2%nat end.

Definition F_R_M1_gspo : Prop :=
  ~ (forall j, (j < 2)%nat ->
       RK 2 (Radv 2 (Rstd 2 (Rind j)) (Rind j))
            (fun i => gspo_weight (NL12 i) (fun _ => 0) / INR (NL12 i)) = 0) /\
  ~ (forall i j, (i < 2)%nat -> (j < 2)%nat ->
       gspo_weight (NL12 i) (fun _ => 0) / INR (NL12 i) =
       gspo_weight (NL12 j) (fun _ => 0) / INR (NL12 j)).

Definition Rlogh (h : R) (i t : nat) : R := match i with O => 0 | _ => h end.

Definition F_R_M1_gspo_equal_lengths : Prop := exists h : R,
  ~ (forall j, (j < 2)%nat ->
       RK 2 (Radv 2 (Rstd 2 (Rind j)) (Rind j)) (fun i => gspo_weight 1 (Rlogh h i) / INR 1) = 0) /\
  ~ (forall i j, (i < 2)%nat -> (j < 2)%nat -> gspo_weight 1 (Rlogh h i) = gspo_weight 1 (Rlogh h j)).
